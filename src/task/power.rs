//! `tasks/<repo>/<id>/power.toml` (optional): the kill rate a task's probes must reach, and the
//! surviving mutants reviewed as equivalent to the reference, each with its reason
//! (docs/tasks-format.md).

use serde::Deserialize;
use toml::Spanned;

use super::error::ManifestError;
use super::manifest::Task;

/// The kill rate a task must reach unless its power.toml says otherwise.
pub const DEFAULT_THRESHOLD: f64 = 0.9;

/// The file beside task.toml.
pub const POWER_FILE: &str = "power.toml";

#[derive(Debug, Clone, PartialEq)]
pub struct PowerConfig {
    /// Killed / (killed + survived) must be at least this.
    pub threshold: f64,
    pub equivalent: Vec<Equivalent>,
    /// Files of the upstream change the task does not ask for: no mutant is made in them.
    pub out_of_scope: Vec<OutOfScope>,
    /// When not empty, the only files of the reference change that get mutants (a
    /// release-sourced task's change is the whole diff between two releases, not the PR's).
    pub only: Vec<String>,
    /// Probe edits reviewed as sending the judge's subject exactly what the probes sent before
    /// (a port to a new probe-library API): the records computed against `from` hold for `to`.
    pub port: Vec<ProbePort>,
}

/// A reviewed probe edit that changes no request the probes make (docs/tasks-format.md).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbePort {
    /// The probe digest the records were computed against (`sha256:…`).
    pub from: String,
    /// The probe digest after the edit.
    pub to: String,
    /// What changed, and why every request and comparison is the same.
    pub reason: String,
}

impl PowerConfig {
    /// Whether a record computed against probes `recorded` holds for probes `current`: the
    /// same digest, or one reviewed port from the first to the second.
    pub fn carries(&self, recorded: &str, current: &str) -> bool {
        recorded == current
            || self
                .port
                .iter()
                .any(|p| p.from == recorded && p.to == current)
    }
}

/// Which files of the reference change get mutants, as a power record keeps it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scope {
    /// power.toml's `out_of_scope` paths, sorted.
    pub out_of_scope: Vec<String>,
    /// power.toml's `only` paths, sorted (empty: every file of the change).
    pub only: Vec<String>,
}

impl Scope {
    /// Whether mutants are made in `path` (a changed file that is not an official test).
    pub fn covers(&self, path: &str) -> bool {
        !self.out_of_scope.iter().any(|p| p == path)
            && (self.only.is_empty() || self.only.iter().any(|p| p == path))
    }
}

/// A file of the upstream change outside the task (the prompt does not ask for it).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutOfScope {
    /// Its path in the repository.
    pub path: String,
    /// Why the task does not cover it.
    pub reason: String,
}

impl PowerConfig {
    /// The paths of `out_of_scope`, sorted (as the power record keeps them).
    pub fn out_of_scope_paths(&self) -> Vec<String> {
        let mut paths: Vec<String> = self.out_of_scope.iter().map(|o| o.path.clone()).collect();
        paths.sort();
        paths
    }

    /// The files that get mutants, as the power record keeps them.
    pub fn scope(&self) -> Scope {
        let mut only = self.only.clone();
        only.sort();
        Scope {
            out_of_scope: self.out_of_scope_paths(),
            only,
        }
    }
}

/// A mutant reviewed as equivalent to the reference.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Equivalent {
    /// The mutant's stable id (from the power record).
    pub mutant: String,
    /// Why no correct probe can tell it from the reference.
    pub reason: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPower {
    #[serde(default)]
    threshold: Option<Spanned<f64>>,
    #[serde(default)]
    equivalent: Vec<Spanned<Equivalent>>,
    #[serde(default)]
    out_of_scope: Vec<Spanned<OutOfScope>>,
    #[serde(default)]
    only: Option<Spanned<Vec<String>>>,
    #[serde(default)]
    port: Vec<Spanned<ProbePort>>,
}

/// The task's power.toml, or the defaults when it has none.
pub fn load_power_config(task: &Task) -> Result<PowerConfig, ManifestError> {
    let file = task.dir.join(POWER_FILE);
    let default = PowerConfig {
        threshold: DEFAULT_THRESHOLD,
        equivalent: Vec::new(),
        out_of_scope: Vec::new(),
        only: Vec::new(),
        port: Vec::new(),
    };
    let text = match std::fs::read_to_string(&file) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(default),
        Err(e) => {
            return Err(ManifestError::whole_file(
                &file,
                format!("cannot read: {e}"),
            ));
        }
    };
    let raw: RawPower =
        toml::from_str(&text).map_err(|e| ManifestError::from_toml(&file, &text, &e))?;
    let mut config = default;
    if let Some(t) = raw.threshold {
        let value = *t.get_ref();
        if !(value > 0.0 && value <= 1.0) {
            return Err(ManifestError::at(
                &file,
                &text,
                t.span(),
                Some("threshold"),
                "must be in (0, 1]",
            ));
        }
        config.threshold = value;
    }
    for e in raw.equivalent {
        let span = e.span();
        let e = e.into_inner();
        if e.reason.trim().is_empty() {
            return Err(ManifestError::at(
                &file,
                &text,
                span,
                Some("equivalent.reason"),
                format!("mutant `{}`: say why it is equivalent", e.mutant),
            ));
        }
        config.equivalent.push(e);
    }
    for o in raw.out_of_scope {
        let span = o.span();
        let o = o.into_inner();
        if o.reason.trim().is_empty() {
            return Err(ManifestError::at(
                &file,
                &text,
                span,
                Some("out_of_scope.reason"),
                format!("`{}`: say why the task does not cover it", o.path),
            ));
        }
        if config.out_of_scope.iter().any(|x| x.path == o.path) {
            return Err(ManifestError::at(
                &file,
                &text,
                span,
                Some("out_of_scope.path"),
                format!("`{}` is listed twice", o.path),
            ));
        }
        config.out_of_scope.push(o);
    }
    if let Some(only) = raw.only {
        let span = only.span();
        let only = only.into_inner();
        let problem = if only.is_empty() {
            Some("name at least one file, or leave `only` out".to_owned())
        } else if let Some(p) = only
            .iter()
            .find(|p| config.out_of_scope.iter().any(|o| &o.path == *p))
        {
            Some(format!("`{p}` is both in `only` and out of scope"))
        } else {
            only.iter()
                .enumerate()
                .find(|(i, p)| only[..*i].contains(p))
                .map(|(_, p)| format!("`{p}` is listed twice"))
        };
        if let Some(problem) = problem {
            return Err(ManifestError::at(&file, &text, span, Some("only"), problem));
        }
        config.only = only;
    }
    for p in raw.port {
        let span = p.span();
        let p = p.into_inner();
        let digest = |d: &str| {
            d.strip_prefix("sha256:")
                .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        };
        let problem = if !digest(&p.from) || !digest(&p.to) {
            Some("`from` and `to` are probe digests: sha256: and 64 hex digits")
        } else if p.from == p.to {
            Some("`from` and `to` are the same digest")
        } else if p.reason.trim().is_empty() {
            Some("say what changed and why every request is the same")
        } else {
            None
        };
        if let Some(problem) = problem {
            return Err(ManifestError::at(&file, &text, span, Some("port"), problem));
        }
        config.port.push(p);
    }
    Ok(config)
}
