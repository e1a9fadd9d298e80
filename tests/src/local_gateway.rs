//! The gateway's state as a test serves it: open (no keys needed), 1 MiB inline content.

use nimbus_shared::app::{app_state, Adapters, AuthSettings, LoadedConfig};
use nimbus_shared::auth::AuthMode;
use nimbus_shared::batches::BatchSettings;
use nimbus_shared::http::{AppState, HttpSettings};
use std::time::Duration;

/// The state of a gateway over `adapters` with `loaded`'s configuration.
pub fn open_state(loaded: &LoadedConfig, adapters: &Adapters) -> AppState {
    app_state(
        loaded,
        adapters,
        AuthSettings {
            mode: AuthMode::OpenWhenNoKeys,
            cache_ttl: Duration::from_secs(1),
        },
        HttpSettings {
            inline_content_limit: 1024 * 1024,
            public_url: None,
        },
        BatchSettings::from_config(&loaded.config),
    )
    .unwrap()
}
