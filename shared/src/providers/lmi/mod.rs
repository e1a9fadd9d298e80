//! Models served by DJL Serving / LMI containers (`type = "lmi"` over HTTP, `type = "sagemaker"`
//! through a SageMaker endpoint). One protocol, two transports: the provider maps the neutral
//! [`crate::model::ModelRequest`] to an LMI body in the configured schema and reads the answer back;
//! an [`LmiTransport`] only carries bytes.

mod chat_template;
mod http_transport;
mod provider;
mod request;
mod response;
mod stream;
mod transport;

pub use chat_template::{ChatTemplate, DEFAULT_CHAT_TEMPLATE};
pub use http_transport::HttpLmiTransport;
pub use provider::LmiProvider;
pub use request::LMI_GENERATION_PARAMETERS;
pub use response::MODEL_ERROR_STATUS;
pub use transport::{ByteStream, LmiTransport, SageMakerConnector};

#[cfg(test)]
mod tests;
