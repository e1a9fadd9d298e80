//! The ids of a `/batch_inference` batch's items, derived from the batch's id: the batch id is a
//! UUIDv7 whose low 24 bits are zero, and item `i`'s inference id (and, when the caller named
//! none, its episode id) is the batch id with `i + 1` in the low 23 bits (bit 23 set for the
//! episode). So an id alone says which batch holds the item and where: results are kept in pages
//! per batch, and no per-item index is ever written. Every id stays a valid UUIDv7 with the batch's
//! time, and a batch's items sort in input order.

use uuid::Uuid;

const LOW_BITS: u128 = (1 << 24) - 1;
const EPISODE_BIT: u128 = 1 << 23;
const INDEX_BITS: u128 = EPISODE_BIT - 1;

/// At most this many items in a batch whose ids derive from it.
pub(crate) const MAX_DERIVED_ITEMS: u32 = (INDEX_BITS - 1) as u32;

/// Which of an item's ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ItemIdKind {
    Inference,
    Episode,
}

/// One id of one item of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchItemId {
    pub batch_id: Uuid,
    pub index: u32,
    pub kind: ItemIdKind,
}

/// A batch id items can derive their ids from: `minted` (a UUIDv7) with its low 24 bits cleared.
pub fn batch_base(minted: Uuid) -> Uuid {
    Uuid::from_u128(minted.as_u128() & !LOW_BITS)
}

impl BatchItemId {
    pub fn inference(batch_id: Uuid, index: u32) -> Self {
        Self {
            batch_id,
            index,
            kind: ItemIdKind::Inference,
        }
    }

    pub fn episode(batch_id: Uuid, index: u32) -> Self {
        Self {
            batch_id,
            index,
            kind: ItemIdKind::Episode,
        }
    }

    /// The id; `None` past [`MAX_DERIVED_ITEMS`].
    pub fn id(&self) -> Option<Uuid> {
        if self.index >= MAX_DERIVED_ITEMS {
            return None;
        }
        let flag = match self.kind {
            ItemIdKind::Inference => 0,
            ItemIdKind::Episode => EPISODE_BIT,
        };
        let base = batch_base(self.batch_id).as_u128();
        Some(Uuid::from_u128(base | flag | (u128::from(self.index) + 1)))
    }

    /// The batch item an id would be, if it is shaped like one. Any UUIDv7 with a nonzero index
    /// part parses: whether that batch exists, and holds the item, is for the store to say.
    pub fn parse(id: Uuid) -> Option<Self> {
        if id.get_version_num() != 7 {
            return None;
        }
        let raw = id.as_u128();
        let position = raw & INDEX_BITS;
        if position == 0 {
            return None;
        }
        let kind = if raw & EPISODE_BIT == 0 {
            ItemIdKind::Inference
        } else {
            ItemIdKind::Episode
        };
        Some(Self {
            batch_id: Uuid::from_u128(raw & !LOW_BITS),
            index: u32::try_from(position - 1).ok()?,
            kind,
        })
    }

    /// Whether `id` is this batch's item `index` (of `kind`), as [`Self::id`] would make it.
    pub fn of_batch(id: Uuid, batch_id: Uuid, kind: ItemIdKind) -> Option<u32> {
        Self::parse(id)
            .filter(|item| item.kind == kind && item.batch_id == batch_id)
            .map(|item| item.index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn item_ids_round_trip_and_sort_in_input_order() {
        let batch = batch_base(Uuid::now_v7());
        assert_eq!(batch.get_version_num(), 7);
        assert!(BatchItemId::parse(batch).is_none(), "a batch id is no item");
        let ids: Vec<Uuid> = (0..5).map(|i| BatchItemId::inference(batch, i).id().unwrap()).collect();
        for (i, id) in ids.iter().enumerate() {
            assert_eq!(id.get_version_num(), 7);
            assert_eq!(id.get_variant(), uuid::Variant::RFC4122);
            let parsed = BatchItemId::parse(*id).unwrap();
            assert_eq!(parsed, BatchItemId::inference(batch, i as u32));
        }
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(sorted, ids);
        let episode = BatchItemId::episode(batch, 3).id().unwrap();
        assert_ne!(episode, ids[3]);
        assert_eq!(BatchItemId::of_batch(episode, batch, ItemIdKind::Episode), Some(3));
        assert_eq!(BatchItemId::of_batch(episode, batch, ItemIdKind::Inference), None);
        let other = batch_base(Uuid::now_v7());
        assert_eq!(BatchItemId::of_batch(ids[1], other, ItemIdKind::Inference), None);
    }

    #[test]
    fn the_largest_index_fits_and_no_further() {
        let batch = batch_base(Uuid::now_v7());
        let last = BatchItemId::episode(batch, MAX_DERIVED_ITEMS - 1).id().unwrap();
        assert_eq!(
            BatchItemId::parse(last),
            Some(BatchItemId::episode(batch, MAX_DERIVED_ITEMS - 1))
        );
        assert!(BatchItemId::inference(batch, MAX_DERIVED_ITEMS).id().is_none());
        assert!(BatchItemId::parse(Uuid::new_v4()).is_none());
    }
}
