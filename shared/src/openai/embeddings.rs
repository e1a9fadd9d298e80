//! `/v1/embeddings` types.

use base64::Engine as _;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, utoipa::ToSchema)]
#[schema(example = json!({"model": "dummy-embedding", "input": "Hello"}))]
pub struct EmbeddingRequest {
    pub model: String,
    pub input: EmbeddingInput,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encoding_format: Option<EncodingFormat>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dimensions: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

/// A string, strings, a token array, or token arrays.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, utoipa::ToSchema)]
#[serde(untagged)]
pub enum EmbeddingInput {
    Text(String),
    Texts(Vec<String>),
    Tokens(Vec<u32>),
    TokenBatches(Vec<Vec<u32>>),
}

impl EmbeddingInput {
    /// Each input as text (token arrays spelled out as numbers), in order.
    pub(crate) fn as_texts(&self) -> Vec<String> {
        let tokens_text = |tokens: &[u32]| tokens.iter().map(u32::to_string).collect::<Vec<_>>().join(" ");
        match self {
            Self::Text(text) => vec![text.clone()],
            Self::Texts(texts) => texts.clone(),
            Self::Tokens(tokens) => vec![tokens_text(tokens)],
            Self::TokenBatches(batches) => batches.iter().map(|t| tokens_text(t)).collect(),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Self::Text(_) | Self::Tokens(_) => 1,
            Self::Texts(texts) => texts.len(),
            Self::TokenBatches(batches) => batches.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, Default, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EncodingFormat {
    #[default]
    Float,
    Base64,
}

#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
pub struct EmbeddingResponse {
    pub object: &'static str,
    pub data: Vec<EmbeddingData>,
    pub model: String,
    pub usage: EmbeddingUsage,
}

#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
pub struct EmbeddingData {
    pub object: &'static str,
    pub index: usize,
    pub embedding: EmbeddingVector,
}

impl EmbeddingResponse {
    /// The answer as a JSON value with each float written as the direct answer writes it (its
    /// shortest `f32` form). `serde_json::to_value` would widen every `f32` to the nearest `f64`,
    /// printed with up to 17 digits, so a stored answer (a batch line, an async result) would
    /// differ from the same request answered directly.
    pub(crate) fn to_json_value(&self) -> Result<serde_json::Value, serde_json::Error> {
        serde_json::from_slice(&serde_json::to_vec(self)?)
    }
}

/// Floats, or little-endian f32 bytes in base64 (what the SDKs ask for by default).
#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
#[serde(untagged)]
pub enum EmbeddingVector {
    Float(Vec<f32>),
    Base64(String),
}

impl EmbeddingVector {
    pub fn encode(vector: Vec<f32>, format: EncodingFormat) -> Self {
        match format {
            EncodingFormat::Float => Self::Float(vector),
            EncodingFormat::Base64 => {
                let bytes: Vec<u8> = vector.iter().flat_map(|v| v.to_le_bytes()).collect();
                Self::Base64(base64::engine::general_purpose::STANDARD.encode(bytes))
            }
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, utoipa::ToSchema)]
pub struct EmbeddingUsage {
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub total_tokens: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedding_floats_are_written_as_the_direct_answer_writes_them() {
        let response = EmbeddingResponse {
            object: "list",
            data: vec![EmbeddingData {
                object: "embedding",
                index: 0,
                embedding: EmbeddingVector::Float(vec![0.1, -0.3360462]),
            }],
            model: "m".into(),
            usage: EmbeddingUsage::default(),
        };
        let value = response.to_json_value().unwrap();
        assert_eq!(value["data"][0]["embedding"].to_string(), "[0.1,-0.3360462]");
        let widened = serde_json::to_value(&response).unwrap();
        assert_ne!(
            widened["data"][0]["embedding"], value["data"][0]["embedding"],
            "what to_value would write"
        );
    }

    #[test]
    fn base64_is_little_endian_f32() {
        let EmbeddingVector::Base64(text) = EmbeddingVector::encode(vec![1.0, -0.5], EncodingFormat::Base64) else {
            panic!("expected base64");
        };
        let bytes = base64::engine::general_purpose::STANDARD.decode(text).unwrap();
        assert_eq!(&bytes[..4], &1.0f32.to_le_bytes());
        assert_eq!(&bytes[4..], &(-0.5f32).to_le_bytes());
    }

    #[test]
    fn every_input_shape_parses() {
        for (json, n) in [(r#""a""#, 1), (r#"["a","b"]"#, 2), ("[1,2,3]", 1), ("[[1],[2]]", 2)] {
            let input: EmbeddingInput = serde_json::from_str(json).unwrap();
            assert_eq!(input.len(), n, "{json}");
            assert_eq!(input.as_texts().len(), n);
        }
    }
}
