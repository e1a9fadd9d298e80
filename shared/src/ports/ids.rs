//! The ids that cross module boundaries, one type per kind of thing, so a value of one kind
//! cannot be passed where another is expected: a batch's id ([`BatchId`]), a file's
//! ([`FileId`]), a webhook delivery's ([`DeliveryId`]) and an async request's
//! ([`AsyncRequestId`]). Each has the shape of [`super::ProjectId`]: on the wire, in queue
//! messages and in stored records it is the plain string (`#[serde(transparent)]`).

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            pub fn new(id: impl Into<String>) -> Self {
                Self(id.into())
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }
    };
}

string_id!(
    /// A batch's id (`batch_…`): the batch API's calls, its queue jobs, its events.
    BatchId
);
string_id!(
    /// A file's id (`file-…`): a batch's input, output and error files.
    FileId
);
string_id!(
    /// A webhook delivery's id: the record of one event for one endpoint, and its queue jobs.
    DeliveryId
);
string_id!(
    /// An async inference request's id: its queue jobs.
    AsyncRequestId
);

#[cfg(test)]
mod tests {
    use super::*;

    fn is_the_plain_string<T>(id: T, text: &str)
    where
        T: fmt::Display + AsRef<str> + Serialize + serde::de::DeserializeOwned + PartialEq + fmt::Debug,
    {
        assert_eq!(id.to_string(), text);
        assert_eq!(id.as_ref(), text);
        assert_eq!(serde_json::to_value(&id).unwrap(), serde_json::json!(text));
        let back: T = serde_json::from_value(serde_json::json!(text)).unwrap();
        assert_eq!(back, id);
    }

    #[test]
    fn each_is_the_plain_string_on_the_wire_and_in_text() {
        is_the_plain_string(BatchId::new("batch_1"), "batch_1");
        is_the_plain_string(FileId::new("file-1"), "file-1");
        is_the_plain_string(DeliveryId::new("d1"), "d1");
        is_the_plain_string(AsyncRequestId::new("r1"), "r1");
        assert_eq!(BatchId::new("b").as_str(), "b");
        assert_eq!(FileId::new("f").as_str(), "f");
        assert_eq!(DeliveryId::new("d").as_str(), "d");
        assert_eq!(AsyncRequestId::new("r").as_str(), "r");
        assert!(BatchId::new("a") < BatchId::new("b"));
    }
}
