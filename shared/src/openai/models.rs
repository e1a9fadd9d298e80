//! `/v1/models` types.

use serde::Serialize;

#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
pub struct ModelObject {
    pub id: String,
    pub object: &'static str,
    pub created: i64,
    pub owned_by: String,
}

#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
pub struct ModelList {
    pub object: &'static str,
    pub data: Vec<ModelObject>,
}
