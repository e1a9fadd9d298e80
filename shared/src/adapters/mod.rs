//! Adapters: implementations of the ports for AWS and for the embedded (local) stack, and the
//! deferred-work tasks both hosts share.

pub mod aws;
pub mod deferred_tasks;
pub mod embedded;
pub mod records;
pub mod sagemaker_runtime;
pub(crate) mod sealing_cipher;
pub mod webhook_http;

pub use deferred_tasks::DeferredTasks;
pub use webhook_http::HttpWebhookTransport;
