//! The one cipher behind every data-key sealer (the embedded key file, the AWS Parameter Store
//! key): ChaCha20-Poly1305 under a 32-byte key.
//!
//! A sealed value is `prefix` + base64(nonce ‖ ciphertext ‖ tag): a random 12-byte nonce per seal,
//! the context as associated data, so a value copied to another context does not open.

use crate::ports::{check_sealable, decode_sealed, encode_sealed, SealError};
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use rand::TryRngCore as _;

/// The key's length in bytes.
pub(crate) const KEY_LEN: usize = 32;
const NONCE_LEN: usize = 12;

/// A data key ready to seal and open.
pub(crate) struct SealingCipher {
    cipher: ChaCha20Poly1305,
}

impl SealingCipher {
    /// The cipher of `key`.
    pub fn new(key: &[u8; KEY_LEN]) -> Self {
        Self {
            cipher: ChaCha20Poly1305::new(Key::from_slice(key)),
        }
    }

    /// A fresh random key (for a sealer making its key on first use).
    pub(crate) fn random_key() -> Result<[u8; KEY_LEN], SealError> {
        let mut key = [0u8; KEY_LEN];
        random_bytes(&mut key)?;
        Ok(key)
    }

    /// `plaintext` sealed to `context`, as `prefix` + base64.
    pub fn seal(&self, prefix: &str, context: &str, plaintext: &[u8]) -> Result<String, SealError> {
        check_sealable(plaintext)?;
        let mut nonce = [0u8; NONCE_LEN];
        random_bytes(&mut nonce)?;
        let ciphertext = self
            .cipher
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: plaintext,
                    aad: context.as_bytes(),
                },
            )
            .map_err(|_| SealError::Unavailable("encryption failed".into()))?;
        let mut sealed = Vec::with_capacity(NONCE_LEN + ciphertext.len());
        sealed.extend_from_slice(&nonce);
        sealed.extend_from_slice(&ciphertext);
        Ok(encode_sealed(prefix, &sealed))
    }

    /// The plaintext of a value [`seal`](Self::seal) made with `prefix` for `context`.
    pub fn open(&self, prefix: &str, context: &str, sealed: &str) -> Result<Vec<u8>, SealError> {
        let bytes = decode_sealed(prefix, sealed)?;
        if bytes.len() < NONCE_LEN {
            return Err(SealError::Corrupt("too short".into()));
        }
        let (nonce, ciphertext) = bytes.split_at(NONCE_LEN);
        self.cipher
            .decrypt(
                Nonce::from_slice(nonce),
                Payload {
                    msg: ciphertext,
                    aad: context.as_bytes(),
                },
            )
            .map_err(|_| SealError::Corrupt("authentication failed (tampered, another context or another key)".into()))
    }
}

/// `buf` filled from the system's random source.
fn random_bytes(buf: &mut [u8]) -> Result<(), SealError> {
    rand::rngs::OsRng
        .try_fill_bytes(buf)
        .map_err(|e| SealError::Unavailable(format!("the system random source failed: {e}")))
}
