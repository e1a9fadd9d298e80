//! Adapters: implementations of the ports for AWS and for the embedded (local) stack, and the
//! deferred-work tasks both hosts share.

pub mod aws;
pub(crate) mod deferred_tasks;
pub mod embedded;
pub mod records;
pub(crate) mod sagemaker_runtime;
pub(crate) mod sealing_cipher;
pub(crate) mod webhook_http;

pub use deferred_tasks::DeferredTasks;
