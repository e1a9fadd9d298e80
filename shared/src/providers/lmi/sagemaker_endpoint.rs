//! The endpoint a `type = "sagemaker"` provider's configuration names, as its transport is opened.

use crate::config::{LmiSchema, SageMakerProviderConfig};
use crate::ports::lmi_transport::SageMakerEndpoint;
use std::time::Duration;

/// The endpoint `config` names, asking streams for the answer shape of its schema.
pub(crate) fn sagemaker_endpoint(config: &SageMakerProviderConfig) -> SageMakerEndpoint {
    SageMakerEndpoint {
        endpoint_name: config.endpoint_name.clone(),
        region: config.region.clone(),
        target_variant: config.target_variant.clone(),
        inference_component: config.inference_component.clone(),
        stream_accept: stream_accept(config.schema),
        timeout: Duration::from_millis(config.timeout_ms),
    }
}

/// What a stream of `schema` is asked for: LMI's JSON lines, or TGI's server-sent events.
fn stream_accept(schema: LmiSchema) -> &'static str {
    match schema {
        LmiSchema::TgiCompat => "text/event-stream",
        _ => "application/jsonlines",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_ask_for_json_lines_or_tgi_server_sent_events() {
        assert_eq!(stream_accept(LmiSchema::RollingBatch), "application/jsonlines");
        assert_eq!(stream_accept(LmiSchema::Chat), "application/jsonlines");
        assert_eq!(stream_accept(LmiSchema::TgiCompat), "text/event-stream");
    }

    #[test]
    fn the_endpoint_is_the_configured_one() {
        let config: SageMakerProviderConfig = toml::from_str(
            "endpoint_name = \"e\"\nregion = \"eu-west-1\"\ntarget_variant = \"v\"\ninference_component = \"c\"\ntimeout_ms = 1500",
        )
        .unwrap();
        let endpoint = sagemaker_endpoint(&config);
        assert_eq!(endpoint.endpoint_name, "e");
        assert_eq!(endpoint.region.as_deref(), Some("eu-west-1"));
        assert_eq!(endpoint.target_variant.as_deref(), Some("v"));
        assert_eq!(endpoint.inference_component.as_deref(), Some("c"));
        assert_eq!(endpoint.timeout, Duration::from_millis(1500));
    }
}
