//! How each API surface states the inference domain's errors. The HTTP routes and the lines of
//! queued work written in a surface's format (batch output lines, async results) share them.

pub mod openai;
