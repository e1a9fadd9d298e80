//! Models served by DJL Serving / LMI containers (`type = "lmi"` over HTTP, `type = "sagemaker"`
//! through a SageMaker endpoint). One protocol, two transports: the provider maps the neutral
//! [`crate::model::ModelRequest`] to an LMI body in the configured schema and reads the answer back;
//! an [`crate::ports::lmi_transport::LmiTransport`] only carries bytes.

mod chat_template;
mod http_transport;
mod protocol;
mod provider;
mod request;
mod response;
mod sagemaker_endpoint;
mod stream;

#[cfg(test)]
pub(crate) use chat_template::{ChatTemplate, ChatTemplateError};
#[cfg(test)]
pub(crate) use protocol::MODEL_ERROR_STATUS;
pub(crate) use protocol::{finish_reason_to_lmi, is_generation_parameter, PASS_THROUGH_PARAMETERS};
pub(crate) use provider::LmiProvider;
pub(crate) use sagemaker_endpoint::sagemaker_endpoint;

#[cfg(test)]
mod tests;
