//! Adapters: implementations of the ports for AWS and for the embedded (local) stack.

pub mod aws;
pub mod embedded;
pub mod records;
