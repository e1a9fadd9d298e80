//! State in one DynamoDB table (single-table design).
//!
//! Item layout: `pk = "{kind}#{id}"` (hash key), `owner_key = "{kind}#{owner}"` and
//! `sort_key = "{created_at_ms:015}#{id}"` (the `by_owner` GSI), `version` (N), `created_at_ms` (N),
//! `expires_at` (N, the TTL attribute), `kind`, `id`, `owner`, and `body` (JSON text).
//!
//! The `by_owner` index projects every attribute but `body` ([`OWNER_INDEX_ATTRIBUTES`]): every
//! write of a record is copied to the index, and bodies are most of a record's size, so the copy
//! stays at about one write unit. A listing that reads bodies gets them with a consistent
//! `GetItem` per record ([`StateStore::list_by_owner`]); the due-work index reads none
//! ([`StateStore::list_heads_by_owner`]).

use super::describe_sdk_error;
use crate::ports::{ListOrder, ListQuery, Page, Record, StateStore, StorageError};
use async_trait::async_trait;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
use futures::{StreamExt, TryStreamExt};
use std::collections::HashMap;

/// The GSI that lists an owner's records in creation order.
pub(crate) const OWNER_INDEX: &str = "by_owner";

/// The attributes [`OWNER_INDEX`] projects besides the keys (`pk`, `owner_key`, `sort_key`):
/// everything a record is but its body. The template's `NonKeyAttributes` must name exactly these.
pub const OWNER_INDEX_ATTRIBUTES: [&str; 6] = ["kind", "id", "owner", "created_at_ms", "version", "expires_at"];

/// Item reads one listing page has in flight at once.
const BODY_READS_IN_FLIGHT: usize = 32;

/// State store on the DynamoDB table `table`.
#[derive(Debug, Clone)]
pub struct DynamoDbStateStore {
    client: aws_sdk_dynamodb::Client,
    table: String,
}

type Item = HashMap<String, AttributeValue>;

fn primary_key(kind: &str, id: &str) -> String {
    format!("{kind}#{id}")
}

fn owner_key(kind: &str, owner: &str) -> String {
    format!("{kind}#{owner}")
}

fn to_item(record: &Record) -> Item {
    let mut item = Item::new();
    item.insert("pk".into(), AttributeValue::S(primary_key(&record.kind, &record.id)));
    item.insert(
        "owner_key".into(),
        AttributeValue::S(owner_key(&record.kind, &record.owner)),
    );
    item.insert("sort_key".into(), AttributeValue::S(record.cursor().sort_key()));
    item.insert("kind".into(), AttributeValue::S(record.kind.clone()));
    item.insert("id".into(), AttributeValue::S(record.id.clone()));
    item.insert("owner".into(), AttributeValue::S(record.owner.clone()));
    item.insert(
        "created_at_ms".into(),
        AttributeValue::N(record.created_at_ms.to_string()),
    );
    item.insert("version".into(), AttributeValue::N(record.version.to_string()));
    if let Some(expires_at) = record.expires_at {
        item.insert("expires_at".into(), AttributeValue::N(expires_at.to_string()));
    }
    item.insert("body".into(), AttributeValue::S(record.body.to_string()));
    item
}

fn string_attr(item: &Item, name: &str) -> Result<String, StorageError> {
    match item.get(name) {
        Some(AttributeValue::S(s)) => Ok(s.clone()),
        _ => Err(StorageError::Backend(format!("item lacks string attribute `{name}`"))),
    }
}

fn number_attr<T: std::str::FromStr>(item: &Item, name: &str) -> Result<Option<T>, StorageError> {
    match item.get(name) {
        Some(AttributeValue::N(n)) => n
            .parse()
            .map(Some)
            .map_err(|_| StorageError::Backend(format!("attribute `{name}` is not a number"))),
        None => Ok(None),
        Some(_) => Err(StorageError::Backend(format!("attribute `{name}` is not a number"))),
    }
}

/// A whole item of the table (its body required).
fn from_item(item: &Item) -> Result<Record, StorageError> {
    string_attr(item, "body")?;
    head_from_item(item)
}

/// A record of the owner index: its `body` is `null` unless the index projects it (a table
/// created before the index projected less keeps `ALL`, see the template's
/// `OwnerIndexProjection`).
fn head_from_item(item: &Item) -> Result<Record, StorageError> {
    let body = match item.get("body") {
        None => serde_json::Value::Null,
        Some(_) => serde_json::from_str(&string_attr(item, "body")?)
            .map_err(|e| StorageError::Backend(format!("corrupt record body: {e}")))?,
    };
    Ok(Record {
        kind: string_attr(item, "kind")?,
        id: string_attr(item, "id")?,
        owner: string_attr(item, "owner")?,
        created_at_ms: number_attr(item, "created_at_ms")?.unwrap_or(0),
        version: number_attr(item, "version")?.unwrap_or(0),
        expires_at: number_attr(item, "expires_at")?,
        body,
    })
}

impl DynamoDbStateStore {
    pub fn new(sdk_config: &aws_config::SdkConfig, table: impl Into<String>) -> Self {
        Self {
            client: aws_sdk_dynamodb::Client::new(sdk_config),
            table: table.into(),
        }
    }
}

#[async_trait]
impl StateStore for DynamoDbStateStore {
    async fn create(&self, record: &Record) -> Result<(), StorageError> {
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(to_item(record)))
            .condition_expression("attribute_not_exists(pk)")
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(e) => match e.as_service_error() {
                Some(service) if service.is_conditional_check_failed_exception() => Err(StorageError::Conflict),
                _ => Err(StorageError::Backend(describe_sdk_error(&e))),
            },
        }
    }

    async fn get(&self, kind: &str, id: &str) -> Result<Option<Record>, StorageError> {
        let output = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("pk", AttributeValue::S(primary_key(kind, id)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| StorageError::Backend(describe_sdk_error(&e)))?;
        output.item().map(from_item).transpose()
    }

    async fn update(&self, record: &Record, expected_version: u64) -> Result<(), StorageError> {
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(to_item(record)))
            .condition_expression("#version = :expected")
            .expression_attribute_names("#version", "version")
            .expression_attribute_values(":expected", AttributeValue::N(expected_version.to_string()))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(e) => match e.as_service_error() {
                Some(service) if service.is_conditional_check_failed_exception() => Err(StorageError::Conflict),
                _ => Err(StorageError::Backend(describe_sdk_error(&e))),
            },
        }
    }

    async fn update_all(&self, updates: &[(Record, u64)]) -> Result<(), StorageError> {
        crate::ports::state::check_update_all(updates)?;
        if updates.is_empty() {
            return Ok(());
        }
        let mut items = Vec::with_capacity(updates.len());
        for (record, expected) in updates {
            let put = Put::builder()
                .table_name(&self.table)
                .set_item(Some(to_item(record)))
                .condition_expression("#version = :expected")
                .expression_attribute_names("#version", "version")
                .expression_attribute_values(":expected", AttributeValue::N(expected.to_string()))
                .build()
                .map_err(|e| StorageError::Invalid(e.to_string()))?;
            items.push(TransactWriteItem::builder().put(put).build());
        }
        let result = self
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(e) => match e.as_service_error() {
                Some(TransactWriteItemsError::TransactionCanceledException(cancelled))
                    if cancelled.cancellation_reasons().iter().any(|reason| {
                        matches!(reason.code(), Some("ConditionalCheckFailed" | "TransactionConflict"))
                    }) =>
                {
                    Err(StorageError::Conflict)
                }
                _ => Err(StorageError::Backend(describe_sdk_error(&e))),
            },
        }
    }

    async fn delete(&self, kind: &str, id: &str, expected_version: Option<u64>) -> Result<bool, StorageError> {
        let mut request = self
            .client
            .delete_item()
            .table_name(&self.table)
            .key("pk", AttributeValue::S(primary_key(kind, id)))
            .return_values(aws_sdk_dynamodb::types::ReturnValue::AllOld);
        if let Some(expected) = expected_version {
            request = request
                .condition_expression("#version = :expected")
                .expression_attribute_names("#version", "version")
                .expression_attribute_values(":expected", AttributeValue::N(expected.to_string()));
        }
        match request.send().await {
            Ok(output) => Ok(output.attributes().is_some_and(|a| !a.is_empty())),
            Err(e) => match e.as_service_error() {
                Some(service) if service.is_conditional_check_failed_exception() => Err(StorageError::Conflict),
                _ => Err(StorageError::Backend(describe_sdk_error(&e))),
            },
        }
    }

    async fn list_by_owner(&self, query: &ListQuery) -> Result<Page, StorageError> {
        let heads = self.list_heads_by_owner(query).await?;
        // The index holds no bodies: read each record (consistently). One gone since the query
        // was deleted meanwhile is left out.
        let records: Vec<Option<Record>> = futures::stream::iter(heads.records)
            .map(|head| async move {
                if head.body.is_null() {
                    self.get(&head.kind, &head.id).await
                } else {
                    Ok(Some(head))
                }
            })
            .buffered(BODY_READS_IN_FLIGHT)
            .try_collect()
            .await?;
        Ok(Page {
            records: records.into_iter().flatten().collect(),
            has_more: heads.has_more,
        })
    }

    async fn list_heads_by_owner(&self, query: &ListQuery) -> Result<Page, StorageError> {
        let wanted = query.limit.saturating_add(1);
        let mut records = Vec::with_capacity(wanted.min(1024));
        let owner = owner_key(&query.kind, &query.owner);
        let mut start_key: Option<Item> = query.after.as_ref().map(|cursor| {
            let mut key = Item::new();
            key.insert("pk".into(), AttributeValue::S(primary_key(&query.kind, &cursor.id)));
            key.insert("owner_key".into(), AttributeValue::S(owner.clone()));
            key.insert("sort_key".into(), AttributeValue::S(cursor.sort_key()));
            key
        });
        loop {
            let remaining = wanted - records.len();
            let output = self
                .client
                .query()
                .table_name(&self.table)
                .index_name(OWNER_INDEX)
                .key_condition_expression("owner_key = :owner")
                .expression_attribute_values(":owner", AttributeValue::S(owner.clone()))
                .scan_index_forward(query.order == ListOrder::Asc)
                .limit(i32::try_from(remaining.min(1000)).unwrap_or(1000))
                .set_exclusive_start_key(start_key.take())
                .send()
                .await
                .map_err(|e| StorageError::Backend(describe_sdk_error(&e)))?;
            for item in output.items() {
                records.push(head_from_item(item)?);
            }
            match output.last_evaluated_key() {
                Some(key) if records.len() < wanted && !key.is_empty() => {
                    start_key = Some(key.clone());
                }
                _ => break,
            }
        }
        let has_more = records.len() > query.limit;
        records.truncate(query.limit);
        Ok(Page { records, has_more })
    }
}
