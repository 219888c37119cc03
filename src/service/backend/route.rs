//! Which backend grades a task: the first `[[backends.route]]` rule that matches the task's
//! class (GPU count, labels, id) wins; no match means `local`. Pure.

use serde::Deserialize;

use crate::task::{Gpus, Resources};

/// The backends a route can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize)]
pub enum BackendName {
    /// This server's workers and its local Docker (the embedded default).
    #[serde(rename = "local")]
    Local,
    #[serde(rename = "slurm")]
    Slurm,
    #[serde(rename = "github-actions")]
    GitHubActions,
}

impl BackendName {
    pub fn as_str(self) -> &'static str {
        match self {
            BackendName::Local => "local",
            BackendName::Slurm => "slurm",
            BackendName::GitHubActions => "github-actions",
        }
    }
}

/// One routing rule; every condition given must hold.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Route {
    pub backend: BackendName,
    /// The task needs at least this many GPUs.
    #[serde(default)]
    pub min_gpus: Option<u32>,
    /// The task needs at most this many GPUs.
    #[serde(default)]
    pub max_gpus: Option<u32>,
    /// The task carries every one of these labels.
    #[serde(default)]
    pub labels: Vec<String>,
    /// The task is one of these ids.
    #[serde(default)]
    pub tasks: Vec<String>,
}

/// How many GPUs a task's grade needs.
pub fn gpu_count(resources: &Resources) -> u32 {
    match &resources.gpus {
        Gpus::Count(n) => *n,
        Gpus::Ids(ids) => u32::try_from(ids.len()).unwrap_or(u32::MAX),
    }
}

impl Route {
    fn matches(&self, task_id: &str, resources: &Resources) -> bool {
        let gpus = gpu_count(resources);
        self.min_gpus.is_none_or(|min| gpus >= min)
            && self.max_gpus.is_none_or(|max| gpus <= max)
            && self.labels.iter().all(|l| resources.labels.contains(l))
            && (self.tasks.is_empty() || self.tasks.iter().any(|t| t == task_id))
    }
}

/// The backend of the first matching route, else `local`.
pub fn route(routes: &[Route], task_id: &str, resources: &Resources) -> BackendName {
    routes
        .iter()
        .find(|r| r.matches(task_id, resources))
        .map_or(BackendName::Local, |r| r.backend)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::Timeouts;

    fn resources(gpus: u32, labels: &[&str]) -> Resources {
        Resources {
            gpus: Gpus::Count(gpus),
            memory_mb: 1024,
            cpus: 1.0,
            pids: 64,
            test_timeout_s: 60,
            timeouts: Timeouts {
                build_s: 60,
                tests_s: 60,
                probes_s: 60,
            },
            labels: labels.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn rule(backend: BackendName) -> Route {
        Route {
            backend,
            min_gpus: None,
            max_gpus: None,
            labels: vec![],
            tasks: vec![],
        }
    }

    #[test]
    fn first_matching_rule_wins_and_no_match_is_local() {
        let routes = vec![
            Route {
                labels: vec!["h100".into()],
                ..rule(BackendName::GitHubActions)
            },
            Route {
                min_gpus: Some(1),
                ..rule(BackendName::Slurm)
            },
            Route {
                tasks: vec!["cpu-heavy".into()],
                ..rule(BackendName::Slurm)
            },
        ];
        let table: &[(&str, u32, &[&str], BackendName)] = &[
            ("t", 0, &[], BackendName::Local),
            ("t", 1, &[], BackendName::Slurm),
            ("t", 4, &["nvlink"], BackendName::Slurm),
            ("t", 8, &["h100", "nvlink"], BackendName::GitHubActions),
            ("t", 0, &["h100"], BackendName::GitHubActions),
            ("cpu-heavy", 0, &[], BackendName::Slurm),
        ];
        for (task, gpus, labels, want) in table {
            assert_eq!(
                route(&routes, task, &resources(*gpus, labels)),
                *want,
                "{task} gpus={gpus} labels={labels:?}"
            );
        }
    }

    #[test]
    fn gpu_bounds_are_inclusive_and_ids_count() {
        let routes = vec![Route {
            min_gpus: Some(2),
            max_gpus: Some(4),
            ..rule(BackendName::Slurm)
        }];
        assert_eq!(route(&routes, "t", &resources(1, &[])), BackendName::Local);
        assert_eq!(route(&routes, "t", &resources(2, &[])), BackendName::Slurm);
        assert_eq!(route(&routes, "t", &resources(4, &[])), BackendName::Slurm);
        assert_eq!(route(&routes, "t", &resources(5, &[])), BackendName::Local);
        let mut by_ids = resources(0, &[]);
        by_ids.gpus = Gpus::Ids(vec!["0".into(), "3".into()]);
        assert_eq!(route(&routes, "t", &by_ids), BackendName::Slurm);
    }
}
