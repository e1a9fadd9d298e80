//! The gateway-only `credentials` object of an OpenAI request body: provider keys the client
//! passes per request (`{"name": "key"}`), taken out before the body goes to a provider.

use super::error::ApiError;
use crate::user_text::excerpt;
use serde_json::{Map, Value};
use std::collections::HashMap;

/// Take the gateway-only `credentials` object (`{"name": "key"}`) out of the raw body.
pub(crate) fn take_credentials(raw: &mut Map<String, Value>) -> Result<HashMap<String, String>, ApiError> {
    match raw.remove("credentials") {
        None | Some(Value::Null) => Ok(HashMap::new()),
        Some(Value::Object(map)) => map
            .into_iter()
            .map(|(name, value)| match value {
                Value::String(key) => Ok((name, key)),
                _ => Err(
                    ApiError::invalid_request(format!("Credential `{}` must be a string.", excerpt(&name)))
                        .with_param(format!("credentials.{}", excerpt(&name))),
                ),
            })
            .collect(),
        Some(_) => {
            Err(ApiError::invalid_request("`credentials` must be an object of strings.").with_param("credentials"))
        }
    }
}
