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

pub use chat_template::{ChatTemplate, ChatTemplateError};
pub use http_transport::HttpLmiTransport;
pub use protocol::{
    finish_reason_from_lmi, finish_reason_to_lmi, is_error_line, is_forwarded_parameter, is_generation_parameter,
    reported_error, ReportedError, ERROR_TOKEN_ID, MODELLED_PARAMETERS, MODEL_ERROR_STATUS,
    OPENAI_FORWARDED_MODELLED_PARAMETERS, PASS_THROUGH_PARAMETERS,
};
pub use provider::{LmiBuildError, LmiProvider};
pub use sagemaker_endpoint::sagemaker_endpoint;

#[cfg(test)]
mod tests;
