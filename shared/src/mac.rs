//! HMAC-SHA256, the one keyed digest Nimbus computes (webhook signatures, API key tags).

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// HMAC-SHA256 of the concatenated `parts` under `key`.
pub(crate) fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    // HMAC takes keys of any length (long keys are hashed), so this constructor cannot fail.
    let Ok(mut mac) = <Hmac<Sha256> as Mac>::new_from_slice(key) else {
        return Vec::new();
    };
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().to_vec()
}
