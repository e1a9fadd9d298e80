//! The LMI provider: templates, request mapping, answers, streams, and the HTTP transport.

mod answers;
mod fake;
mod http;
mod mapping;
mod routing;
mod streams;
mod templates;
