//! Webhook signing secrets and the two signature headers Nimbus sends.
//!
//! A secret is `whsec_` followed by the standard base64 of 24 to 64 random bytes. The same secret
//! signs in two ways, and the two use different keys:
//! - Standard Webhooks (`webhook-signature`): the key is the base64-DECODED part after `whsec_`;
//!   the signed content is `{webhook-id}.{webhook-timestamp}.{body}`.
//! - Baseten (`X-BASETEN-SIGNATURE`): the key is the whole secret STRING's UTF-8 bytes
//!   (`whsec_` included); the signed content is the body alone, and the MAC is written in hex.

use crate::mac::hmac_sha256;
use base64::alphabet;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD};
use base64::engine::DecodePaddingMode;
use base64::Engine;
use std::fmt;

/// The prefix of every signing secret.
pub(crate) const SECRET_PREFIX: &str = "whsec_";
/// The fewest random bytes a secret may hold.
pub(crate) const MIN_SECRET_BYTES: usize = 24;
/// The most random bytes a secret may hold.
pub(crate) const MAX_SECRET_BYTES: usize = 64;
/// How many random bytes [`SigningSecret::generate`] draws.
pub(crate) const GENERATED_SECRET_BYTES: usize = 32;
/// How many characters after `whsec_` [`SigningSecret::masked`] shows.
const MASK_VISIBLE_CHARS: usize = 2;

/// Standard base64 that accepts the key with or without its `=` padding (the Standard Webhooks
/// libraries pad before decoding, so both forms are in use).
const LENIENT_STANDARD: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// Why a text is not a signing secret. Messages never quote the text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretFormatError {
    #[error("a webhook signing secret starts with \"whsec_\"")]
    MissingPrefix,
    #[error("the part of a webhook signing secret after \"whsec_\" must be standard base64")]
    NotBase64,
    #[error(
        "a webhook signing secret holds {MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} bytes after base64 decoding, \
         this one holds {bytes}"
    )]
    WrongLength { bytes: usize },
}

/// A signing secret `whsec_<base64 of 24..64 bytes>`. Its `Debug` shows only the masked form.
#[derive(Clone)]
pub struct SigningSecret {
    text: String,
    /// The decoded bytes after the prefix: the Standard Webhooks HMAC key.
    key: Vec<u8>,
}

impl SigningSecret {
    /// A fresh secret of [`GENERATED_SECRET_BYTES`] bytes from the thread's CSPRNG (seeded by the OS).
    pub fn generate() -> Self {
        let key: [u8; GENERATED_SECRET_BYTES] = rand::random();
        Self {
            text: format!("{SECRET_PREFIX}{}", STANDARD.encode(key)),
            key: key.to_vec(),
        }
    }

    /// Reads a secret as written (padding after the base64 is optional).
    pub fn parse(text: &str) -> Result<Self, SecretFormatError> {
        let encoded = text
            .strip_prefix(SECRET_PREFIX)
            .ok_or(SecretFormatError::MissingPrefix)?;
        let key = LENIENT_STANDARD
            .decode(encoded)
            .map_err(|_| SecretFormatError::NotBase64)?;
        if !(MIN_SECRET_BYTES..=MAX_SECRET_BYTES).contains(&key.len()) {
            return Err(SecretFormatError::WrongLength { bytes: key.len() });
        }
        Ok(Self {
            text: text.to_owned(),
            key,
        })
    }

    /// The full secret, to hand to its owner once.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// A form safe to list and log: the prefix and a couple of characters, e.g. `whsec_Mf…`.
    pub fn masked(&self) -> String {
        let visible: String = self.text[SECRET_PREFIX.len()..]
            .chars()
            .take(MASK_VISIBLE_CHARS)
            .collect();
        format!("{SECRET_PREFIX}{visible}…")
    }
}

impl fmt::Debug for SigningSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("SigningSecret").field(&self.masked()).finish()
    }
}

/// Standard Webhooks `webhook-signature` value: `v1,<base64 HMAC>` per secret, space-separated
/// (several secrets during a rotation). Empty when `secrets` is. Neither `msg_id` nor the
/// timestamp may contain `.` (the receiver could not split the signed content otherwise).
pub fn standard_signature(secrets: &[SigningSecret], msg_id: &str, timestamp_s: i64, body: &[u8]) -> String {
    let timestamp = timestamp_s.to_string();
    secrets
        .iter()
        .map(|secret| {
            let mac = hmac_sha256(
                &secret.key,
                &[msg_id.as_bytes(), b".", timestamp.as_bytes(), b".", body],
            );
            format!("v1,{}", STANDARD.encode(mac))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Baseten `X-BASETEN-SIGNATURE` value: `v1=<hex HMAC of the body>` per secret, comma-separated.
/// The key is the secret string's bytes, NOT the decoded key Standard Webhooks uses. Empty when
/// `secrets` is.
pub(crate) fn baseten_signature(secrets: &[SigningSecret], body: &[u8]) -> String {
    secrets
        .iter()
        .map(|secret| format!("v1={}", hex::encode(hmac_sha256(secret.text.as_bytes(), &[body]))))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use hmac::{Hmac, Mac};
    use sha2::Sha256;

    /// The Standard Webhooks reference vector.
    const VECTOR_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const VECTOR_ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const VECTOR_TIMESTAMP: i64 = 1614265330;
    const VECTOR_BODY: &[u8] = br#"{"test": 2432232314}"#;
    const VECTOR_SIGNATURE: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    fn secret(text: &str) -> SigningSecret {
        match SigningSecret::parse(text) {
            Ok(secret) => secret,
            Err(e) => panic!("{text}: {e}"),
        }
    }

    #[test]
    fn standard_signature_matches_the_reference_vector() {
        let signature = standard_signature(&[secret(VECTOR_SECRET)], VECTOR_ID, VECTOR_TIMESTAMP, VECTOR_BODY);
        assert_eq!(signature, VECTOR_SIGNATURE);
    }

    #[test]
    fn standard_signature_lists_every_secret_space_separated() {
        let other = SigningSecret::generate();
        let both = standard_signature(
            &[other.clone(), secret(VECTOR_SECRET)],
            VECTOR_ID,
            VECTOR_TIMESTAMP,
            VECTOR_BODY,
        );
        let alone = standard_signature(&[other], VECTOR_ID, VECTOR_TIMESTAMP, VECTOR_BODY);
        assert_eq!(both, format!("{alone} {VECTOR_SIGNATURE}"));
        assert_eq!(standard_signature(&[], VECTOR_ID, VECTOR_TIMESTAMP, VECTOR_BODY), "");
    }

    #[test]
    fn baseten_signature_keys_on_the_secret_string_and_lists_secrets_comma_separated() {
        let first = secret(VECTOR_SECRET);
        let second = SigningSecret::generate();
        let expect = |s: &SigningSecret| {
            let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(s.as_str().as_bytes()).unwrap();
            mac.update(VECTOR_BODY);
            format!("v1={}", hex::encode(mac.finalize().into_bytes()))
        };
        let both = baseten_signature(&[first.clone(), second.clone()], VECTOR_BODY);
        assert_eq!(both, format!("{},{}", expect(&first), expect(&second)));
        // The decoded key (the Standard Webhooks one) gives a different MAC.
        let decoded_key = hex::encode(hmac_sha256(&first.key, &[VECTOR_BODY]));
        assert_ne!(expect(&first), format!("v1={decoded_key}"));
        assert_eq!(baseten_signature(&[], VECTOR_BODY), "");
    }

    #[test]
    fn generated_secrets_hold_32_random_bytes_and_parse_back() {
        let generated = SigningSecret::generate();
        let text = generated.as_str();
        assert!(text.starts_with("whsec_"), "{text}");
        assert_eq!(STANDARD.decode(&text[6..]).unwrap().len(), 32);
        assert_eq!(secret(text).key, generated.key);
        assert_ne!(SigningSecret::generate().as_str(), text);
    }

    #[test]
    fn parse_accepts_padded_and_unpadded_base64() {
        let padded = STANDARD.encode([7u8; 32]);
        assert!(padded.ends_with('='));
        assert_eq!(secret(&format!("whsec_{padded}")).key, vec![7u8; 32]);
        assert_eq!(
            secret(&format!("whsec_{}", padded.trim_end_matches('='))).key,
            vec![7u8; 32]
        );
    }

    #[test]
    fn parse_rejects_bad_formats_without_quoting_them() {
        let cases = [
            (
                "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".to_owned(),
                SecretFormatError::MissingPrefix,
            ),
            (
                "WHSEC_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".to_owned(),
                SecretFormatError::MissingPrefix,
            ),
            ("whsec_not*base64!".to_owned(), SecretFormatError::NotBase64),
            (
                " whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".to_owned(),
                SecretFormatError::MissingPrefix,
            ),
            (
                "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw ".to_owned(),
                SecretFormatError::NotBase64,
            ),
            (
                format!("whsec_{}", STANDARD.encode([1u8; 23])),
                SecretFormatError::WrongLength { bytes: 23 },
            ),
            (
                format!("whsec_{}", STANDARD.encode([1u8; 65])),
                SecretFormatError::WrongLength { bytes: 65 },
            ),
            ("whsec_".to_owned(), SecretFormatError::WrongLength { bytes: 0 }),
        ];
        for (text, expected) in cases {
            let error = SigningSecret::parse(&text).err();
            assert_eq!(error.as_ref(), Some(&expected), "{text}");
            let message = expected.to_string();
            assert!(!message.contains("MfKQ9"), "{message}");
        }
        assert!(SigningSecret::parse(&format!("whsec_{}", STANDARD.encode([1u8; 24]))).is_ok());
        assert!(SigningSecret::parse(&format!("whsec_{}", STANDARD.encode([1u8; 64]))).is_ok());
    }

    #[test]
    fn masked_and_debug_show_only_a_prefix() {
        let vector = secret(VECTOR_SECRET);
        assert_eq!(vector.masked(), "whsec_Mf…");
        let debug = format!("{vector:?}");
        assert!(!debug.contains("KQ9r8"), "{debug}");
        assert!(debug.contains("whsec_Mf…"), "{debug}");
    }
}
