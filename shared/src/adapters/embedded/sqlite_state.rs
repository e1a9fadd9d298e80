//! State in SQLite (WAL, synchronous=FULL): crash-safe, and several processes (the server and the
//! `nimbus keys` command) may use the same file at once.
//!
//! One thread owns the connection and runs the operations in the order they come. Operations
//! that queued up while it was busy run together in one transaction, each inside its own
//! savepoint (an operation that fails leaves the others' writes alone), and each is answered
//! once that transaction is committed: one commit, and one fsync, for the group (group commit).
//! Under load, e.g. the records and cache entries written after `/inference` answers, the
//! commits would otherwise queue up one fsync at a time.

use crate::ports::{ListOrder, ListQuery, Page, Record, SortCursor, StateStore, StorageError};
use async_trait::async_trait;
use rusqlite::{params, Connection, OptionalExtension};
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;
use tokio::sync::oneshot;

/// At most this many operations share one transaction.
const MAX_GROUP: usize = 256;

/// State store backed by one SQLite file.
#[derive(Clone)]
pub struct SqliteStateStore {
    operations: mpsc::Sender<Operation>,
}

/// Delivers an operation's outcome, given how its transaction ended.
type Delivery = Box<dyn FnOnce(Result<(), StorageError>) + Send>;

/// One operation, run on the connection's thread: whether it succeeded (its writes are kept),
/// and how to deliver its outcome once its transaction has ended.
type Operation = Box<dyn FnOnce(&mut Connection) -> (bool, Delivery) + Send>;

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
        let (operations, queue) = mpsc::channel();
        std::thread::Builder::new()
            .name("nimbus-sqlite".into())
            .spawn(move || serve(conn, queue))
            .map_err(|e| StorageError::Backend(format!("starting the state database thread: {e}")))?;
        Ok(Self { operations })
    }

    /// Run `work` on the connection's thread; its outcome once its transaction has ended.
    async fn with_conn<T, F>(&self, work: F) -> Result<T, StorageError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, StorageError> + Send + 'static,
    {
        let (answer, answered) = oneshot::channel();
        let operation: Operation = Box::new(move |conn| {
            let outcome = work(conn);
            let kept = outcome.is_ok();
            let deliver: Delivery = Box::new(move |ended| {
                // Nobody to tell when the caller has stopped waiting.
                let _ = answer.send(ended.and(outcome));
            });
            (kept, deliver)
        });
        self.operations.send(operation).map_err(|_| stopped())?;
        answered.await.map_err(|_| stopped())?
    }
}

fn stopped() -> StorageError {
    StorageError::Backend("the state database thread has stopped".into())
}

/// The connection's thread: runs what is queued, in groups, until every handle is dropped.
fn serve(mut conn: Connection, queue: mpsc::Receiver<Operation>) {
    while let Ok(first) = queue.recv() {
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match queue.try_recv() {
                Ok(operation) => group.push(operation),
                Err(_) => break,
            }
        }
        run_group(&mut conn, group);
    }
}

/// One operation runs as it is (its statements commit themselves); several run in one
/// transaction, each in a savepoint, and are answered after its commit. If the transaction
/// cannot be committed, none of the group's writes is kept and every operation gets the error.
fn run_group(conn: &mut Connection, group: Vec<Operation>) {
    if group.len() == 1 || conn.execute_batch("BEGIN IMMEDIATE").is_err() {
        for operation in group {
            let (_, deliver) = operation(conn);
            deliver(Ok(()));
        }
        return;
    }
    let mut deliveries = Vec::with_capacity(group.len());
    let mut failure = None;
    for operation in group {
        let isolated = conn.execute_batch("SAVEPOINT operation");
        let (kept, deliver) = operation(conn);
        let closed = match isolated {
            Ok(()) if kept => conn.execute_batch("RELEASE operation"),
            Ok(()) => conn.execute_batch("ROLLBACK TO operation; RELEASE operation"),
            Err(error) => Err(error),
        };
        if let Err(error) = closed {
            failure.get_or_insert(db_error(error));
        }
        deliveries.push(deliver);
    }
    let ended = match failure {
        None => conn.execute_batch("COMMIT").map_err(db_error),
        Some(error) => Err(error),
    };
    if ended.is_err() {
        if let Err(error) = conn.execute_batch("ROLLBACK") {
            tracing::debug!(%error, "rolling back a failed group (SQLite may have done it already)");
        }
    }
    for deliver in deliveries {
        deliver(ended.clone());
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

/// A record's columns, ready to bind. Made on the caller's side, so the JSON body is written
/// once and the record is not copied to cross to the connection's thread.
struct Row {
    kind: String,
    id: String,
    owner: String,
    sort_key: String,
    created_at_ms: i64,
    version: i64,
    expires_at: Option<i64>,
    body: String,
}

impl Row {
    fn new(record: &Record) -> Result<Self, StorageError> {
        Ok(Self {
            kind: record.kind.clone(),
            id: record.id.clone(),
            owner: record.owner.clone(),
            sort_key: record.cursor().sort_key(),
            created_at_ms: record.created_at_ms,
            version: version_param(record.version)?,
            expires_at: record.expires_at,
            body: record.body.to_string(),
        })
    }
}

/// Write `row` over the row at `expected_version`; the number of rows changed (0 or 1).
fn update_row(conn: &Connection, row: &Row, expected_version: i64) -> Result<usize, StorageError> {
    let mut statement = conn
        .prepare_cached(
            "UPDATE records SET owner = ?3, sort_key = ?4, created_at_ms = ?5, version = ?6,
             expires_at = ?7, body = ?8 WHERE kind = ?1 AND id = ?2 AND version = ?9",
        )
        .map_err(db_error)?;
    statement
        .execute(params![
            row.kind,
            row.id,
            row.owner,
            row.sort_key,
            row.created_at_ms,
            row.version,
            row.expires_at,
            row.body,
            expected_version,
        ])
        .map_err(db_error)
}

const SELECT_COLUMNS: &str = "kind, id, owner, created_at_ms, version, expires_at, body";
const SELECT_ONE: &str =
    "SELECT kind, id, owner, created_at_ms, version, expires_at, body FROM records WHERE kind = ?1 AND id = ?2";

#[async_trait]
impl StateStore for SqliteStateStore {
    async fn create(&self, record: &Record) -> Result<(), StorageError> {
        let row = Row::new(record)?;
        self.with_conn(move |conn| {
            let mut statement = conn
                .prepare_cached(
                    "INSERT INTO records (kind, id, owner, sort_key, created_at_ms, version, expires_at, body)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                )
                .map_err(db_error)?;
            let result = statement.execute(params![
                row.kind,
                row.id,
                row.owner,
                row.sort_key,
                row.created_at_ms,
                row.version,
                row.expires_at,
                row.body,
            ]);
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
            let mut statement = conn.prepare_cached(SELECT_ONE).map_err(db_error)?;
            let row = statement
                .query_row(params![kind, id], row_to_record)
                .optional()
                .map_err(db_error)?;
            row.map(finish_record).transpose()
        })
        .await
    }

    async fn update(&self, record: &Record, expected_version: u64) -> Result<(), StorageError> {
        let (row, expected_version) = (Row::new(record)?, version_param(expected_version)?);
        self.with_conn(move |conn| {
            if update_row(conn, &row, expected_version)? == 1 {
                Ok(())
            } else {
                Err(StorageError::Conflict)
            }
        })
        .await
    }

    async fn update_all(&self, updates: &[(Record, u64)]) -> Result<(), StorageError> {
        crate::ports::state::check_update_all(updates)?;
        let rows = updates
            .iter()
            .map(|(record, expected)| Ok((Row::new(record)?, version_param(*expected)?)))
            .collect::<Result<Vec<_>, StorageError>>()?;
        self.with_conn(move |conn| {
            let tx = conn.savepoint().map_err(db_error)?;
            for (row, expected) in &rows {
                if update_row(&tx, row, *expected)? != 1 {
                    // Dropping the savepoint rolls back what it wrote.
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
            let tx = conn.savepoint().map_err(db_error)?;
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

    /// SQLite lists bodies at no extra cost: the heads are the full records.
    async fn list_heads_by_owner(&self, query: &ListQuery) -> Result<Page, StorageError> {
        self.list_by_owner(query).await
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

#[cfg(test)]
mod tests {
    use super::*;
    use futures::future::{join3, join_all};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    fn record(id: &str, version: u64) -> Record {
        Record {
            kind: "thing".into(),
            id: id.into(),
            owner: "p".into(),
            created_at_ms: 1,
            version,
            expires_at: None,
            body: serde_json::json!({ "id": id, "version": version }),
        }
    }

    /// A file database whose commits are counted.
    async fn counted_store(dir: &tempfile::TempDir) -> (SqliteStateStore, Arc<AtomicUsize>) {
        let store = SqliteStateStore::open(&dir.path().join("state.sqlite3")).unwrap();
        let commits = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&commits);
        store
            .with_conn(move |conn| {
                conn.commit_hook(Some(move || {
                    counter.fetch_add(1, Ordering::SeqCst);
                    false
                }));
                Ok(())
            })
            .await
            .unwrap();
        (store, commits)
    }

    /// Runs `queued` while the connection's thread is held busy, so that all of it queues up;
    /// then lets the thread go and waits for every outcome.
    async fn while_busy<T>(store: &SqliteStateStore, queued: Vec<futures::future::BoxFuture<'_, T>>) -> Vec<T> {
        let (release, held) = mpsc::channel::<()>();
        let busy = store.with_conn(move |_| {
            held.recv()
                .map_err(|_| StorageError::Backend("never released".into()))?;
            Ok(())
        });
        // join3 polls in order: the busy operation is sent first, then everything queued, and
        // only then is the thread released.
        let (busy, outcomes, ()) = join3(busy, join_all(queued), async move {
            release.send(()).unwrap();
        })
        .await;
        busy.unwrap();
        outcomes
    }

    #[tokio::test]
    async fn operations_that_queue_up_share_one_commit() {
        let dir = tempfile::tempdir().unwrap();
        let (store, commits) = counted_store(&dir).await;
        let records: Vec<Record> = (0..50).map(|i| record(&format!("r{i}"), 1)).collect();
        let creates = records.iter().map(|r| Box::pin(store.create(r)) as _).collect();
        let outcomes = while_busy(&store, creates).await;
        assert!(outcomes.iter().all(Result::is_ok), "{outcomes:?}");
        // One commit for the 50 (two if the thread picked some up with the busy operation).
        let commits = commits.load(Ordering::SeqCst);
        assert!(commits <= 2, "{commits} commits for 50 queued creates");
        // Committed for everyone: another connection sees them all.
        let other = SqliteStateStore::open(&dir.path().join("state.sqlite3")).unwrap();
        for r in &records {
            assert_eq!(other.get("thing", &r.id).await.unwrap().as_ref(), Some(r));
        }
    }

    #[tokio::test]
    async fn a_failing_operation_in_a_group_keeps_none_of_its_writes_and_all_of_the_others() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = counted_store(&dir).await;
        store.create(&record("x", 1)).await.unwrap();
        store.create(&record("y", 1)).await.unwrap();
        let (a, b) = (record("a", 1), record("b", 1));
        // `update_all` writes x, then finds y at another version: none of it may be kept.
        let all_or_nothing = [(record("x", 2), 1), (record("y", 3), 2)];
        let queued: Vec<futures::future::BoxFuture<'_, Result<(), StorageError>>> = vec![
            Box::pin(store.create(&a)),
            Box::pin(store.create(&a)),
            Box::pin(store.update_all(&all_or_nothing)),
            Box::pin(async { store.delete("thing", "missing", Some(1)).await.map(|_| ()) }),
            Box::pin(store.create(&b)),
        ];
        let outcomes = while_busy(&store, queued).await;
        assert_eq!(
            outcomes,
            vec![
                Ok(()),
                Err(StorageError::Conflict),
                Err(StorageError::Conflict),
                Err(StorageError::Conflict),
                Ok(())
            ]
        );
        assert_eq!(store.get("thing", "a").await.unwrap(), Some(a));
        assert_eq!(store.get("thing", "b").await.unwrap(), Some(b));
        assert_eq!(store.get("thing", "x").await.unwrap(), Some(record("x", 1)));
        assert_eq!(store.get("thing", "y").await.unwrap(), Some(record("y", 1)));
    }

    #[tokio::test]
    async fn an_operation_alone_commits_by_itself() {
        let dir = tempfile::tempdir().unwrap();
        let (store, commits) = counted_store(&dir).await;
        store.create(&record("one", 1)).await.unwrap();
        store.update(&record("one", 2), 1).await.unwrap();
        assert_eq!(commits.load(Ordering::SeqCst), 2);
        assert_eq!(store.get("thing", "one").await.unwrap(), Some(record("one", 2)));
    }
}
