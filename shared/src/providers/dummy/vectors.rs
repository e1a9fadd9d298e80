//! Deterministic unit-length embedding vectors derived from the input text.

use sha2::{Digest, Sha256};

/// A `dimensions`-long vector of unit length, a pure function of `text`.
pub(crate) fn embedding_for(text: &str, dimensions: usize) -> Vec<f32> {
    let mut values = Vec::with_capacity(dimensions);
    let mut block: u64 = 0;
    while values.len() < dimensions {
        let digest = Sha256::new()
            .chain_update(block.to_le_bytes())
            .chain_update(text.as_bytes())
            .finalize();
        for bytes in digest.chunks_exact(4) {
            if values.len() == dimensions {
                break;
            }
            let raw = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
            values.push((f64::from(raw) / f64::from(u32::MAX) * 2.0 - 1.0) as f32);
        }
        block += 1;
    }
    let norm = values.iter().map(|v| f64::from(*v) * f64::from(*v)).sum::<f64>().sqrt();
    if norm > 0.0 {
        for value in &mut values {
            *value = (f64::from(*value) / norm) as f32;
        }
    }
    values
}

#[cfg(test)]
mod tests {
    use super::embedding_for;

    #[test]
    fn vectors_are_deterministic_unit_length_and_input_specific() {
        let a = embedding_for("hello", 40);
        assert_eq!(a.len(), 40);
        assert_eq!(a, embedding_for("hello", 40));
        assert_ne!(a, embedding_for("hullo", 40));
        let norm: f32 = a.iter().map(|v| v * v).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4);
    }
}
