//! Extractors whose rejections are `ApiError` envelopes naming the parameter, in place of axum's
//! plain-text ones: path parameters, query strings, request extensions.

use super::error::ApiError;
use crate::user_text::excerpt;
use axum::extract::{FromRequestParts, Path, Query};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// [`axum::extract::Path`] with envelope rejections (e.g. an id that is not UTF-8 once decoded).
pub(crate) struct ApiPath<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiPath<T>
where
    S: Send + Sync,
    T: DeserializeOwned + Send,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Path(value) = Path::<T>::from_request_parts(parts, state).await?;
        Ok(Self(value))
    }
}

/// A query string of string parameters read into `T`: a parameter given twice, or one `T` does
/// not accept, is a 400 naming it.
pub(crate) struct ApiQuery<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiQuery<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        let Query(pairs) = Query::<Vec<(String, String)>>::try_from_uri(&parts.uri)?;
        query_params(pairs).map(Self)
    }
}

/// `pairs` as a `T`, each name at most once.
fn query_params<T: DeserializeOwned>(pairs: Vec<(String, String)>) -> Result<T, ApiError> {
    let mut object = Map::new();
    for (name, value) in pairs {
        if object.contains_key(&name) {
            return Err(ApiError::invalid_request(format!(
                "Duplicate query parameter '{}': give it once.",
                excerpt(&name)
            ))
            .with_param(excerpt(&name))
            .with_code("duplicate_parameter"));
        }
        object.insert(name, Value::String(value));
    }
    serde_path_to_error::deserialize(Value::Object(object)).map_err(|err| {
        let path = err.path().to_string();
        let message = crate::openai::json_body::bounded_serde_message(&err.inner().to_string());
        let error = ApiError::invalid_request(format!("Invalid query string: {message}.")).with_code("invalid_value");
        if path == "." {
            error
        } else {
            error.with_param(excerpt(&path))
        }
    })
}

/// [`axum::Extension`] with an envelope rejection (a missing extension is the server's fault).
pub(crate) struct ApiExtension<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiExtension<T>
where
    S: Send + Sync,
    T: Clone + Send + Sync + 'static,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let axum::Extension(value) = axum::Extension::<T>::from_request_parts(parts, state).await?;
        Ok(Self(value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    struct Params {
        limit: Option<String>,
        #[allow(dead_code)]
        after: Option<String>,
    }

    fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
        items.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn repeated_parameters_are_named() {
        let err = query_params::<Params>(pairs(&[("limit", "1"), ("limit", "2")])).unwrap_err();
        assert_eq!(err.param.as_deref(), Some("limit"));
        assert!(err.message.contains("'limit'"), "{}", err.message);
        let long = "l".repeat(100_000);
        let err = query_params::<Params>(pairs(&[(&long, "1"), (&long, "2")])).unwrap_err();
        assert!(err.message.len() < 200, "{}", err.message.len());
    }

    #[test]
    fn known_and_unknown_parameters_pass() {
        let params: Params = query_params(pairs(&[("limit", "5"), ("purpose", "batch")])).unwrap();
        assert_eq!(params.limit.as_deref(), Some("5"));
    }
}
