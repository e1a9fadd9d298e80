//! Applying `extra_body` / `extra_headers` in TensorZero's precedence: the request's entries placed
//! before provider configuration (a variant's), the provider's configured entries, then the
//! request's entries placed after (the inference request's), each filtered to this provider.
//!
//! An entry the request sent that cannot be applied is the client's to fix
//! ([`ProviderError::InvalidExtraBody`] / [`ProviderError::InvalidExtraHeader`]); one from
//! configuration is [`ProviderError::Misconfigured`].

use super::ProviderError;
use crate::model::{
    apply_extra_body, apply_extra_headers, entries_for, ExtraBodyEntry, ExtraHeaderEntry, ExtraPlacement,
};
use serde_json::Value;

/// A provider's configured entries, converted once at start-up.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ConfiguredExtras {
    pub body: Vec<ExtraBodyEntry>,
    pub headers: Vec<ExtraHeaderEntry>,
}

impl ConfiguredExtras {
    pub fn from_config(body: &[crate::config::ExtraBodyEntry], headers: &[crate::config::ExtraHeaderEntry]) -> Self {
        // A provider's own entries apply to it alone; their placement is the provider's layer.
        let placement = ExtraPlacement::AfterProviderConfig;
        Self {
            body: body.iter().map(|e| e.to_model(placement)).collect(),
            headers: headers.iter().map(|e| e.to_model(placement)).collect(),
        }
    }

    /// Edit `body` for the provider named `provider` with the request's `entries` around the
    /// configured ones.
    pub(crate) fn edit_body(
        &self,
        body: &mut Value,
        entries: &[ExtraBodyEntry],
        provider: &str,
    ) -> Result<(), ProviderError> {
        let configured = |e| misconfigured(provider, "extra_body", e);
        let before = entries_for(entries, provider, ExtraPlacement::BeforeProviderConfig);
        let after = entries_for(entries, provider, ExtraPlacement::AfterProviderConfig);
        apply_extra_body(body, before).map_err(configured)?;
        apply_extra_body(body, &self.body).map_err(configured)?;
        apply_extra_body(body, after).map_err(ProviderError::InvalidExtraBody)
    }

    /// Edit `headers` for the provider named `provider` with the request's `entries` around the
    /// configured ones.
    pub(crate) fn edit_headers(
        &self,
        headers: &mut http::HeaderMap,
        entries: &[ExtraHeaderEntry],
        provider: &str,
    ) -> Result<(), ProviderError> {
        let configured = |e| misconfigured(provider, "extra_headers", e);
        let before = entries_for(entries, provider, ExtraPlacement::BeforeProviderConfig);
        let after = entries_for(entries, provider, ExtraPlacement::AfterProviderConfig);
        apply_extra_headers(headers, before).map_err(configured)?;
        apply_extra_headers(headers, &self.headers).map_err(configured)?;
        apply_extra_headers(headers, after).map_err(ProviderError::InvalidExtraHeader)
    }
}

fn misconfigured(provider: &str, what: &str, error: impl std::fmt::Display) -> ProviderError {
    ProviderError::Misconfigured(format!(
        "provider `{provider}`: a configured {what} entry cannot be applied: {error}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn configured() -> ConfiguredExtras {
        ConfiguredExtras {
            body: vec![ExtraBodyEntry::set("/layer", json!("provider"))],
            headers: vec![ExtraHeaderEntry::set("x-layer", "provider")],
        }
    }

    fn layered_body(entries: &[ExtraBodyEntry], provider: &str) -> Value {
        let mut body = json!({});
        configured().edit_body(&mut body, entries, provider).unwrap();
        body
    }

    fn layered_header(entries: &[ExtraHeaderEntry], provider: &str) -> Option<String> {
        let mut headers = http::HeaderMap::new();
        configured().edit_headers(&mut headers, entries, provider).unwrap();
        headers.get("x-layer").map(|v| v.to_str().unwrap().to_owned())
    }

    /// Inference-time entries beat the provider's, which beat the variant's.
    #[test]
    fn request_entries_win_over_provider_config_which_wins_over_variant_config() {
        let variant = ExtraBodyEntry::set("/layer", json!("variant")).placed(ExtraPlacement::BeforeProviderConfig);
        let inference = ExtraBodyEntry::set("/layer", json!("inference"));
        assert_eq!(layered_body(std::slice::from_ref(&variant), "p")["layer"], "provider");
        // Listed first in the request, still applied last.
        assert_eq!(layered_body(&[inference, variant], "p")["layer"], "inference");

        let variant = ExtraHeaderEntry::set("x-layer", "variant").placed(ExtraPlacement::BeforeProviderConfig);
        let inference = ExtraHeaderEntry::set("x-layer", "inference");
        assert_eq!(
            layered_header(std::slice::from_ref(&variant), "p").as_deref(),
            Some("provider")
        );
        assert_eq!(layered_header(&[inference, variant], "p").as_deref(), Some("inference"));
        assert_eq!(layered_header(&[ExtraHeaderEntry::delete("x-layer")], "p"), None);
    }

    #[test]
    fn entries_scoped_to_another_provider_are_skipped() {
        let mine = ExtraBodyEntry::set("/mine", json!(1)).for_provider("p");
        let theirs = ExtraBodyEntry::set("/layer", json!("theirs")).for_provider("q");
        let body = layered_body(&[mine, theirs], "p");
        assert_eq!(body, json!({"layer": "provider", "mine": 1}));

        let theirs = ExtraHeaderEntry::delete("x-layer").for_provider("q");
        assert_eq!(
            layered_header(std::slice::from_ref(&theirs), "p").as_deref(),
            Some("provider")
        );
        assert_eq!(layered_header(&[theirs], "q"), None);
    }

    #[test]
    fn a_request_entry_that_cannot_apply_is_the_clients_a_configured_one_is_not() {
        let mut body = json!({"s": "text"});
        let bad = ExtraBodyEntry::set("/s/x", json!(1));
        let err = ConfiguredExtras::default()
            .edit_body(&mut body, std::slice::from_ref(&bad), "p")
            .unwrap_err();
        assert!(matches!(err, ProviderError::InvalidExtraBody(_)), "{err:?}");
        let variant = bad.placed(ExtraPlacement::BeforeProviderConfig);
        let err = ConfiguredExtras::default()
            .edit_body(&mut body, &[variant], "p")
            .unwrap_err();
        assert!(matches!(err, ProviderError::Misconfigured(_)), "{err:?}");

        let mut headers = http::HeaderMap::new();
        let err = ConfiguredExtras::default()
            .edit_headers(&mut headers, &[ExtraHeaderEntry::set("bad name", "v")], "p")
            .unwrap_err();
        assert!(matches!(err, ProviderError::InvalidExtraHeader(_)), "{err:?}");
    }
}
