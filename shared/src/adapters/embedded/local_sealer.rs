//! Credentials sealed with a local key file: ChaCha20-Poly1305 under a random 32-byte key kept in
//! `<data dir>/sealing.key` (mode 0600 on unix), made on first use.
//!
//! A sealed value is `v1.` + the cipher's layout (`adapters::sealing_cipher`).

use crate::adapters::sealing_cipher::{SealingCipher, KEY_LEN};
use crate::ports::{CredentialSealer, SealError};
use async_trait::async_trait;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use tokio::sync::OnceCell;

/// The key file's name in the data directory.
pub(crate) const SEALING_KEY_FILE: &str = "sealing.key";
/// The prefix of values this sealer makes.
const VERSION_PREFIX: &str = "v1.";

/// [`CredentialSealer`] over a key file. The key is read (or made) once, on first use.
pub struct LocalSealer {
    key_path: PathBuf,
    cipher: OnceCell<SealingCipher>,
}

impl std::fmt::Debug for LocalSealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalSealer")
            .field("key_path", &self.key_path)
            .finish_non_exhaustive()
    }
}

impl LocalSealer {
    /// A sealer whose key lives in `data_dir`/[`SEALING_KEY_FILE`]. Nothing is read or written
    /// until the first seal or open.
    pub fn in_data_dir(data_dir: &Path) -> Self {
        Self {
            key_path: data_dir.join(SEALING_KEY_FILE),
            cipher: OnceCell::new(),
        }
    }

    /// Where the key is kept.
    #[cfg(test)]
    pub(crate) fn key_path(&self) -> &Path {
        &self.key_path
    }

    async fn cipher(&self) -> Result<&SealingCipher, SealError> {
        self.cipher
            .get_or_try_init(|| async {
                let path = self.key_path.clone();
                let key = tokio::task::spawn_blocking(move || load_or_create_key(&path))
                    .await
                    .map_err(|e| SealError::Unavailable(format!("reading the sealing key: {e}")))??;
                Ok(SealingCipher::new(&key))
            })
            .await
    }
}

#[async_trait]
impl CredentialSealer for LocalSealer {
    async fn seal(&self, context: &str, plaintext: &[u8]) -> Result<String, SealError> {
        self.cipher().await?.seal(VERSION_PREFIX, context, plaintext)
    }

    async fn open(&self, context: &str, sealed: &str) -> Result<Vec<u8>, SealError> {
        self.cipher().await?.open(VERSION_PREFIX, context, sealed)
    }
}

fn key_error(path: &Path, what: &str, err: impl std::fmt::Display) -> SealError {
    SealError::Unavailable(format!("{what} the sealing key file {}: {err}", path.display()))
}

/// The key in `path`, made first if there is none. A new key is written whole to a temporary file
/// (mode 0600) then linked into place, which fails if another writer got there first: a reader
/// never sees a half-written key, and two writers agree on one key.
fn load_or_create_key(path: &Path) -> Result<[u8; KEY_LEN], SealError> {
    match std::fs::read(path) {
        Ok(bytes) => return key_from_bytes(path, &bytes),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
        Err(err) => return Err(key_error(path, "reading", err)),
    }
    let key = SealingCipher::random_key()?;
    let mut temp_path = path.as_os_str().to_owned();
    temp_path.push(format!(".{}.tmp", uuid::Uuid::now_v7()));
    let temp_path = PathBuf::from(temp_path);
    let written = write_private_file(&temp_path, &key).and_then(|()| match std::fs::hard_link(&temp_path, path) {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(err) => Err(err),
    });
    // The temporary name goes whatever happened; the key (ours or the other writer's) stays.
    let _ = std::fs::remove_file(&temp_path);
    written.map_err(|e| key_error(path, "creating", e))?;
    let bytes = std::fs::read(path).map_err(|e| key_error(path, "reading", e))?;
    key_from_bytes(path, &bytes)
}

fn write_private_file(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path)?;
    file.write_all(contents)?;
    file.sync_all()
}

fn key_from_bytes(path: &Path, bytes: &[u8]) -> Result<[u8; KEY_LEN], SealError> {
    <[u8; KEY_LEN]>::try_from(bytes).map_err(|_| {
        SealError::Unavailable(format!(
            "the sealing key file {} holds {} bytes, not {KEY_LEN}: it is not a key this server made \
             (restore the original; with a new key, credentials sealed before cannot be opened)",
            path.display(),
            bytes.len()
        ))
    })
}

#[cfg(test)]
#[path = "local_sealer_tests.rs"]
mod tests;
