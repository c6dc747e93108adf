//! Policy: what a session lets an agent do, decided before anything runs.
//!
//! Invariant: policy is pure. It sees a tool's declared permission and the
//! call's arguments, and returns a [`Decision`]; it never touches the
//! filesystem or runs anything. Every rule that matches is evaluated and the
//! strictest wins (decisions are ordered: a denial outranks an allow), so
//! adding a rule can only make a session stricter.

use std::fmt;

use serde::Serialize;

use crate::plan::UnknownName;

pub mod rate;
pub mod shell;
pub mod write;

/// How much harm a tool can do, in increasing order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    /// Reads within the sandbox.
    Safe,
    /// Changes files within the sandbox.
    Cautious,
    /// Runs programs.
    Dangerous,
}

impl Level {
    /// The name used in config files.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Safe => "safe",
            Level::Cautious => "cautious",
            Level::Dangerous => "dangerous",
        }
    }
}

impl std::str::FromStr for Level {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, UnknownName> {
        match s {
            "safe" => Ok(Level::Safe),
            "cautious" => Ok(Level::Cautious),
            "dangerous" => Ok(Level::Dangerous),
            other => Err(UnknownName::new(
                "permission level",
                other,
                "safe, cautious or dangerous",
            )),
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a tool can reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Capability {
    /// The network.
    Network,
    /// Files in the sandbox.
    Filesystem,
    /// Running programs.
    Shell,
}

impl Capability {
    /// The name used in config files.
    pub fn as_str(self) -> &'static str {
        match self {
            Capability::Network => "network",
            Capability::Filesystem => "filesystem",
            Capability::Shell => "shell",
        }
    }
}

impl std::str::FromStr for Capability {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, UnknownName> {
        match s {
            "network" => Ok(Capability::Network),
            "filesystem" => Ok(Capability::Filesystem),
            "shell" => Ok(Capability::Shell),
            other => Err(UnknownName::new(
                "capability",
                other,
                "network, filesystem or shell",
            )),
        }
    }
}

/// What a tool declares about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Permission {
    /// Its level.
    pub level: Level,
    /// What it reaches.
    pub capabilities: Vec<Capability>,
}

impl Permission {
    /// A permission of this level and these capabilities.
    pub fn new(level: Level, capabilities: &[Capability]) -> Self {
        Permission {
            level,
            capabilities: capabilities.to_vec(),
        }
    }
}

/// A session's cap on tools: the highest level allowed and the capabilities
/// blocked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermissionPolicy {
    /// Tools above this level are refused. Default `dangerous` (no cap).
    pub max_level: Level,
    /// Tools with any of these capabilities are refused. Default none.
    pub blocked: Vec<Capability>,
}

impl Default for PermissionPolicy {
    fn default() -> Self {
        PermissionPolicy {
            max_level: Level::Dangerous,
            blocked: Vec::new(),
        }
    }
}

/// The outcome of a policy check. Ordered by strictness: the strictest of
/// all matching rules is the decision.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Decision {
    /// Nothing refuses the call.
    Allow,
    /// A rule refuses it.
    Deny {
        /// The rule's stable name (for the audit log), e.g. `permission.level`.
        rule: String,
        /// Why, for the agent.
        reason: String,
    },
}

impl Decision {
    /// A denial by `rule`.
    pub fn deny(rule: impl Into<String>, reason: impl Into<String>) -> Self {
        Decision::Deny {
            rule: rule.into(),
            reason: reason.into(),
        }
    }

    /// Whether the call may go on.
    pub fn allowed(&self) -> bool {
        matches!(self, Decision::Allow)
    }
}

impl PermissionPolicy {
    /// The decision for a tool with this permission: every rule is evaluated,
    /// the strictest wins.
    pub fn check(&self, tool: &str, p: &Permission) -> Decision {
        let mut decisions = vec![Decision::Allow];
        if p.level > self.max_level {
            decisions.push(Decision::deny(
                "permission.level",
                format!(
                    "{tool} is a {} tool and this session allows at most {}",
                    p.level, self.max_level
                ),
            ));
        }
        for c in &p.capabilities {
            if self.blocked.contains(c) {
                decisions.push(Decision::deny(
                    format!("permission.capability.{}", c.as_str()),
                    format!(
                        "{tool} needs the {} capability, which this session blocks",
                        c.as_str()
                    ),
                ));
            }
        }
        decisions.into_iter().max().unwrap_or(Decision::Allow)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_strictest_rule_wins() {
        let shell = Permission::new(Level::Dangerous, &[Capability::Shell]);
        let read = Permission::new(Level::Safe, &[Capability::Filesystem]);
        let open = PermissionPolicy::default();
        assert_eq!(open.check("shell", &shell), Decision::Allow);
        let capped = PermissionPolicy {
            max_level: Level::Cautious,
            blocked: vec![],
        };
        assert!(!capped.check("shell", &shell).allowed());
        assert!(capped.check("file_read", &read).allowed());
        let no_fs = PermissionPolicy {
            max_level: Level::Dangerous,
            blocked: vec![Capability::Filesystem],
        };
        let Decision::Deny { rule, .. } = no_fs.check("file_read", &read) else {
            panic!("blocked capability allowed");
        };
        assert_eq!(rule, "permission.capability.filesystem");
        assert!(no_fs.check("shell", &shell).allowed());
        assert!(Level::Safe < Level::Cautious && Level::Cautious < Level::Dangerous);
        assert!(Decision::Allow < Decision::deny("a", "b"));
    }
}
