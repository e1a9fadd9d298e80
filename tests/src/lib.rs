//! The ports' contract, written once and run against every adapter set: the embedded adapters
//! (tests/embedded_adapters.rs) and the AWS adapters on moto server (tests/aws_adapters_moto.rs).

pub mod async_fakes;
pub mod async_harness;
pub mod batch_assertions;
pub mod batch_harness;
pub mod batch_inference_harness;
pub mod contract;
pub mod due_index_contract;
pub mod lmi_mock;
pub mod local_gateway;
pub mod log_capture;
pub mod moto;
pub mod native_fake;
pub mod records_contract;
pub mod scripted_provider;
pub mod sealer_contract;
