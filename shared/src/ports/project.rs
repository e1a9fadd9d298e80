//! The project every record and request is scoped to.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The project every record and request is scoped to: the caller's project (from its API key),
/// and the owner of the records it makes. On the wire and in stored records it is the plain
/// string (`#[serde(transparent)]`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ProjectId(String);

impl ProjectId {
    pub fn new(project: impl Into<String>) -> Self {
        Self(project.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ProjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for ProjectId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_the_plain_string_on_the_wire_and_in_text() {
        let project = ProjectId::new("team-a");
        assert_eq!(project.as_str(), "team-a");
        assert_eq!(project.to_string(), "team-a");
        assert_eq!(AsRef::<str>::as_ref(&project), "team-a");
        assert_eq!(serde_json::to_value(&project).unwrap(), serde_json::json!("team-a"));
        let back: ProjectId = serde_json::from_str("\"team-a\"").unwrap();
        assert_eq!(back, project);
        assert!(ProjectId::new("a") < ProjectId::new("b"));
    }
}
