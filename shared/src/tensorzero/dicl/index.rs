//! The nearest examples by cosine distance, in memory: every embedding normalised once when the
//! set is loaded, one dot product per example per lookup, a partial selection of the `k` smallest
//! distances (ties keep the stored order), then the `max_distance` cut-off — TensorZero's order
//! (`ORDER BY distance LIMIT k`, then the distance filter).

use super::examples::DiclExample;

/// A loaded example set, ready for lookups.
#[derive(Debug, Default)]
pub struct ExampleIndex {
    examples: Vec<DiclExample>,
    /// The unit-length embeddings, `dimensions` values per example, in example order; an example
    /// whose embedding has another length or no length is left out of every lookup.
    unit: Vec<f32>,
    usable: Vec<usize>,
    dimensions: usize,
}

/// One example found, and its cosine distance (0 = same direction, 2 = opposite).
#[derive(Debug, Clone, Copy)]
pub struct Neighbour<'a> {
    pub example: &'a DiclExample,
    pub distance: f32,
}

impl ExampleIndex {
    pub fn new(examples: Vec<DiclExample>) -> Self {
        let dimensions = examples.first().map_or(0, |e| e.embedding.len());
        let mut unit = Vec::with_capacity(examples.len() * dimensions);
        let mut usable = Vec::with_capacity(examples.len());
        for (position, example) in examples.iter().enumerate() {
            if example.embedding.len() != dimensions {
                continue;
            }
            if let Some(normalised) = normalised(&example.embedding) {
                unit.extend(normalised);
                usable.push(position);
            }
        }
        Self {
            examples,
            unit,
            usable,
            dimensions,
        }
    }

    pub fn len(&self) -> usize {
        self.examples.len()
    }

    pub fn is_empty(&self) -> bool {
        self.examples.is_empty()
    }

    /// The `k` nearest examples to `query`, nearest first, then those within `max_distance`.
    /// A query of another length than the stored embeddings finds nothing.
    pub fn nearest(&self, query: &[f32], k: usize, max_distance: Option<f64>) -> Vec<Neighbour<'_>> {
        if query.len() != self.dimensions || k == 0 {
            return Vec::new();
        }
        let Some(query) = normalised(query) else {
            return Vec::new();
        };
        let mut scored: Vec<(f32, usize)> = self
            .unit
            .chunks_exact(self.dimensions.max(1))
            .zip(&self.usable)
            .map(|(vector, &position)| (1.0 - dot(vector, &query), position))
            .collect();
        let by_distance = |a: &(f32, usize), b: &(f32, usize)| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1));
        if scored.len() > k {
            scored.select_nth_unstable_by(k - 1, by_distance);
            scored.truncate(k);
        }
        scored.sort_unstable_by(by_distance);
        scored
            .into_iter()
            .filter(|(distance, _)| max_distance.is_none_or(|max| f64::from(*distance) <= max))
            .map(|(distance, position)| Neighbour {
                example: &self.examples[position],
                distance,
            })
            .collect()
    }
}

/// Lanes summed apart, so the compiler can use vector instructions (one running sum would fix
/// the order of the additions and keep them scalar).
const LANES: usize = 8;

fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut sums = [0.0f32; LANES];
    let (a_chunks, b_chunks) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let tail: f32 = a_chunks
        .remainder()
        .iter()
        .zip(b_chunks.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in a_chunks.zip(b_chunks) {
        for ((sum, x), y) in sums.iter_mut().zip(x).zip(y) {
            *sum += x * y;
        }
    }
    sums.iter().sum::<f32>() + tail
}

fn normalised(vector: &[f32]) -> Option<Vec<f32>> {
    let norm = vector.iter().map(|v| f64::from(*v) * f64::from(*v)).sum::<f64>().sqrt();
    if !norm.is_finite() || norm == 0.0 || vector.is_empty() {
        return None;
    }
    Some(vector.iter().map(|v| (f64::from(*v) / norm) as f32).collect())
}

/// Cosine distance of two vectors of one length (`None` when either has no direction).
#[cfg(test)]
pub(crate) fn cosine_distance(a: &[f32], b: &[f32]) -> Option<f32> {
    let (a, b) = (normalised(a)?, normalised(b)?);
    (a.len() == b.len()).then(|| 1.0 - dot(&a, &b))
}
