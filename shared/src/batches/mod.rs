//! The batch engine (issue: OpenAI-compatible Batch API). This first part validates an input file
//! as a stream and plans its chunks; the API, worker and poller build on it.

pub mod input_validation;
