//! State in SQLite (WAL, synchronous=FULL): crash-safe, and several processes (the server and the
//! `nimbus keys` command) may use the same file at once.

use crate::ports::{ListOrder, ListQuery, Page, Record, SortCursor, StateStore, StorageError};
use async_trait::async_trait;
use rusqlite::{params, Connection, OptionalExtension};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// State store backed by one SQLite file.
#[derive(Clone)]
pub struct SqliteStateStore {
    conn: Arc<Mutex<Connection>>,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS records (
    kind TEXT NOT NULL,
    id TEXT NOT NULL,
    owner TEXT NOT NULL,
    sort_key TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    version INTEGER NOT NULL,
    expires_at INTEGER,
    body TEXT NOT NULL,
    PRIMARY KEY (kind, id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS records_by_owner ON records (kind, owner, sort_key);
";

fn db_error(err: rusqlite::Error) -> StorageError {
    StorageError::Backend(err.to_string())
}

fn is_constraint_violation(err: &rusqlite::Error) -> bool {
    matches!(
        err,
        rusqlite::Error::SqliteFailure(e, _) if e.code == rusqlite::ErrorCode::ConstraintViolation
    )
}

impl SqliteStateStore {
    /// Open (creating if needed) the database file at `path`.
    pub fn open(path: &Path) -> Result<Self, StorageError> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| StorageError::Backend(e.to_string()))?;
        }
        let conn = Connection::open(path).map_err(db_error)?;
        Self::init(conn)
    }

    /// An in-memory database (tests).
    pub fn in_memory() -> Result<Self, StorageError> {
        Self::init(Connection::open_in_memory().map_err(db_error)?)
    }

    fn init(conn: Connection) -> Result<Self, StorageError> {
        conn.busy_timeout(Duration::from_secs(10)).map_err(db_error)?;
        conn.pragma_update(None, "journal_mode", "WAL").map_err(db_error)?;
        conn.pragma_update(None, "synchronous", "FULL").map_err(db_error)?;
        conn.execute_batch(SCHEMA).map_err(db_error)?;
        Ok(Self {
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    async fn with_conn<T, F>(&self, work: F) -> Result<T, StorageError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, StorageError> + Send + 'static,
    {
        let conn = Arc::clone(&self.conn);
        tokio::task::spawn_blocking(move || {
            let mut guard = conn
                .lock()
                .map_err(|_| StorageError::Backend("state database lock poisoned".into()))?;
            work(&mut guard)
        })
        .await
        .map_err(|e| StorageError::Backend(e.to_string()))?
    }
}

fn row_to_record(row: &rusqlite::Row<'_>) -> rusqlite::Result<(Record, String)> {
    let body: String = row.get(6)?;
    let version: i64 = row.get(4)?;
    Ok((
        Record {
            kind: row.get(0)?,
            id: row.get(1)?,
            owner: row.get(2)?,
            created_at_ms: row.get(3)?,
            version: u64::try_from(version).unwrap_or(0),
            expires_at: row.get(5)?,
            body: serde_json::Value::Null,
        },
        body,
    ))
}

fn finish_record((mut record, body): (Record, String)) -> Result<Record, StorageError> {
    record.body =
        serde_json::from_str(&body).map_err(|e| StorageError::Backend(format!("corrupt record body: {e}")))?;
    Ok(record)
}

fn version_param(version: u64) -> Result<i64, StorageError> {
    i64::try_from(version).map_err(|_| StorageError::Invalid("version out of range".into()))
}

/// Write `record` over the row at `expected_version`; the number of rows changed (0 or 1).
fn update_row(conn: &Connection, record: &Record, expected_version: u64) -> Result<usize, StorageError> {
    conn.execute(
        "UPDATE records SET owner = ?3, sort_key = ?4, created_at_ms = ?5, version = ?6,
         expires_at = ?7, body = ?8 WHERE kind = ?1 AND id = ?2 AND version = ?9",
        params![
            record.kind,
            record.id,
            record.owner,
            record.cursor().sort_key(),
            record.created_at_ms,
            version_param(record.version)?,
            record.expires_at,
            record.body.to_string(),
            version_param(expected_version)?,
        ],
    )
    .map_err(db_error)
}

const SELECT_COLUMNS: &str = "kind, id, owner, created_at_ms, version, expires_at, body";

#[async_trait]
impl StateStore for SqliteStateStore {
    async fn create(&self, record: &Record) -> Result<(), StorageError> {
        let record = record.clone();
        self.with_conn(move |conn| {
            let result = conn.execute(
                "INSERT INTO records (kind, id, owner, sort_key, created_at_ms, version, expires_at, body)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![
                    record.kind,
                    record.id,
                    record.owner,
                    record.cursor().sort_key(),
                    record.created_at_ms,
                    version_param(record.version)?,
                    record.expires_at,
                    record.body.to_string(),
                ],
            );
            match result {
                Ok(_) => Ok(()),
                Err(err) if is_constraint_violation(&err) => Err(StorageError::Conflict),
                Err(err) => Err(db_error(err)),
            }
        })
        .await
    }

    async fn get(&self, kind: &str, id: &str) -> Result<Option<Record>, StorageError> {
        let (kind, id) = (kind.to_owned(), id.to_owned());
        self.with_conn(move |conn| {
            let row = conn
                .query_row(
                    &format!("SELECT {SELECT_COLUMNS} FROM records WHERE kind = ?1 AND id = ?2"),
                    params![kind, id],
                    row_to_record,
                )
                .optional()
                .map_err(db_error)?;
            row.map(finish_record).transpose()
        })
        .await
    }

    async fn update(&self, record: &Record, expected_version: u64) -> Result<(), StorageError> {
        let record = record.clone();
        self.with_conn(move |conn| {
            if update_row(conn, &record, expected_version)? == 1 {
                Ok(())
            } else {
                Err(StorageError::Conflict)
            }
        })
        .await
    }

    async fn update_all(&self, updates: &[(Record, u64)]) -> Result<(), StorageError> {
        crate::ports::state::check_update_all(updates)?;
        let updates = updates.to_vec();
        self.with_conn(move |conn| {
            let tx = conn.transaction().map_err(db_error)?;
            for (record, expected) in &updates {
                if update_row(&tx, record, *expected)? != 1 {
                    // Dropping the transaction rolls back what it wrote.
                    return Err(StorageError::Conflict);
                }
            }
            tx.commit().map_err(db_error)
        })
        .await
    }

    async fn delete(&self, kind: &str, id: &str, expected_version: Option<u64>) -> Result<bool, StorageError> {
        let (kind, id) = (kind.to_owned(), id.to_owned());
        self.with_conn(move |conn| {
            let tx = conn.transaction().map_err(db_error)?;
            let current: Option<i64> = tx
                .query_row(
                    "SELECT version FROM records WHERE kind = ?1 AND id = ?2",
                    params![kind, id],
                    |row| row.get(0),
                )
                .optional()
                .map_err(db_error)?;
            let Some(current) = current else {
                return if expected_version.is_some() {
                    Err(StorageError::Conflict)
                } else {
                    Ok(false)
                };
            };
            if let Some(expected) = expected_version {
                if current != version_param(expected)? {
                    return Err(StorageError::Conflict);
                }
            }
            tx.execute("DELETE FROM records WHERE kind = ?1 AND id = ?2", params![kind, id])
                .map_err(db_error)?;
            tx.commit().map_err(db_error)?;
            Ok(true)
        })
        .await
    }

    async fn list_by_owner(&self, query: &ListQuery) -> Result<Page, StorageError> {
        let query = query.clone();
        self.with_conn(move |conn| {
            let (cmp, dir) = match query.order {
                ListOrder::Asc => (">", "ASC"),
                ListOrder::Desc => ("<", "DESC"),
            };
            let after = query.after.as_ref().map(SortCursor::sort_key);
            let fetch = i64::try_from(query.limit.saturating_add(1)).unwrap_or(i64::MAX);
            let sql = format!(
                "SELECT {SELECT_COLUMNS} FROM records WHERE kind = ?1 AND owner = ?2
                 AND (?3 IS NULL OR sort_key {cmp} ?3) ORDER BY sort_key {dir} LIMIT ?4"
            );
            let mut stmt = conn.prepare_cached(&sql).map_err(db_error)?;
            let rows = stmt
                .query_map(params![query.kind, query.owner, after, fetch], row_to_record)
                .map_err(db_error)?;
            let mut records = Vec::new();
            for row in rows {
                records.push(finish_record(row.map_err(db_error)?)?);
            }
            let has_more = records.len() > query.limit;
            records.truncate(query.limit);
            Ok(Page { records, has_more })
        })
        .await
    }
}
