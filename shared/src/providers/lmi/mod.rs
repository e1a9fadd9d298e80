//! Models served by DJL Serving / LMI containers (`type = "lmi"` over HTTP, `type = "sagemaker"`
//! through a SageMaker endpoint). One protocol, two transports: the provider maps the neutral
//! [`crate::model::ModelRequest`] to an LMI body in the configured schema and reads the answer back;
//! an [`LmiTransport`] only carries bytes.

mod transport;

pub use transport::{ByteStream, LmiTransport, SageMakerConnector};
