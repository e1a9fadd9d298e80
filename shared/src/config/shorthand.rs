//! Model lookup: a `[models.M]` entry, or a `provider::model` shorthand (`openai::gpt-4o-mini`,
//! `dummy::echo`) that stands for a one-provider model. A configured model of the same name wins.

use super::{Config, DummyProviderConfig, ModelConfig, OpenAiProviderConfig, ProviderConfig};
use crate::user_text::excerpt;
use std::borrow::Cow;
use std::collections::BTreeMap;

/// The providers a shorthand may name.
pub(crate) const SHORTHAND_PROVIDERS: [&str; 2] = ["dummy", "openai"];

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum ModelLookupError {
    #[error("unknown model `{}`", excerpt(.0))]
    UnknownModel(String),
    #[error(
        "unknown provider `{}` in the model shorthand (known: {})",
        excerpt(.0),
        SHORTHAND_PROVIDERS.join(", ")
    )]
    UnknownShorthandProvider(String),
    #[error("the model shorthand `{}` names no model after `::`", excerpt(.0))]
    EmptyShorthandModel(String),
}

impl Config {
    /// The model `name` stands for; see the module docs.
    #[cfg(test)]
    pub(crate) fn resolve_model(&self, name: &str) -> Result<Cow<'_, ModelConfig>, ModelLookupError> {
        resolve_model(&self.models, name)
    }
}

pub(crate) fn resolve_model<'a>(
    models: &'a BTreeMap<String, ModelConfig>,
    name: &str,
) -> Result<Cow<'a, ModelConfig>, ModelLookupError> {
    match models.get(name) {
        Some(model) => Ok(Cow::Borrowed(model)),
        None => shorthand_model(name).map(Cow::Owned),
    }
}

/// Whether `name` names a model: one configured (`configured` says) or a valid shorthand. The one
/// rule the router and the async submission checks route by.
pub(crate) fn names_a_model(name: &str, configured: impl FnOnce(&str) -> bool) -> bool {
    configured(name) || shorthand_model(name).is_ok()
}

/// The one-provider model a `provider::model` shorthand stands for (configured models are not
/// consulted: callers check them first). The provider is named after its type.
pub(crate) fn shorthand_model(name: &str) -> Result<ModelConfig, ModelLookupError> {
    let Some((provider, model_name)) = name.split_once("::") else {
        return Err(ModelLookupError::UnknownModel(name.to_owned()));
    };
    if model_name.trim().is_empty() {
        return Err(ModelLookupError::EmptyShorthandModel(name.to_owned()));
    }
    let provider_config = match provider {
        "openai" => ProviderConfig::Openai(OpenAiProviderConfig::for_model(model_name)),
        "dummy" => ProviderConfig::Dummy(DummyProviderConfig::standard()),
        _ => return Err(ModelLookupError::UnknownShorthandProvider(provider.to_owned())),
    };
    Ok(ModelConfig {
        routing: vec![provider.to_owned()],
        providers: BTreeMap::from([(provider.to_owned(), provider_config)]),
        max_concurrency: None,
    })
}
