//! What `validation.json` says about the task a grade is about to use: whether it was
//! validated, on which probes (their digest) and which task.toml (its digest: the tests, the
//! environment's packages and limits). Image ids are not compared: a base image built from
//! Debian packages on another host has another id, and so has every layer above it. `suite::validate` writes the whole record; a grade reads
//! only this much, to grade nothing but what was validated.

use std::path::Path;

use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::Task;

/// The file beside task.toml that `tasks validate` writes.
pub const VALIDATION_FILE: &str = "validation.json";

/// The part of a task's `validation.json` a grade checks itself against.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ValidationStamp {
    pub ok: bool,
    #[serde(default)]
    pub quarantined: Option<String>,
    /// The digest of the probes validation graded ([`probes_digest`]); older records carry
    /// it only in their power record.
    #[serde(default)]
    pub probes_digest: Option<String>,
    /// SHA-256 of task.toml as validated; older records have none (then it is not checked).
    #[serde(default)]
    pub task_sha256: Option<String>,
    #[serde(default)]
    power: Option<StampPower>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
struct StampPower {
    probes_digest: String,
}

impl ValidationStamp {
    /// The probes this record was computed against: validation's own digest, else the power
    /// record's (which `tasks check` keeps equal to the probes on disk).
    pub fn validated_probes(&self) -> Option<&str> {
        self.probes_digest
            .as_deref()
            .or(self.power.as_ref().map(|p| p.probes_digest.as_str()))
    }
}

/// The task's stamp: `Ok(None)` when it was never validated, an error naming the file when
/// the file cannot be read as one.
pub fn read_stamp(task: &Task) -> Result<Option<ValidationStamp>, String> {
    let path = task.dir.join(VALIDATION_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| format!("{} is not a validation record: {e}", path.display()))
}

/// Why grading a task whose probes have digest `probes` and whose task.toml has digest
/// `manifest` would not be grading what was validated (pure); empty when it would. A port
/// reviewed in power.toml (`[[port]]`) carries the validated digest to the ported probes.
pub fn stamp_problems(
    stamp: Option<&ValidationStamp>,
    probes: &str,
    manifest: &str,
    power: &super::PowerConfig,
) -> Vec<String> {
    let Some(stamp) = stamp else {
        return vec!["the task has no validation.json (run `infradev tasks validate`)".into()];
    };
    let mut problems = Vec::new();
    if !stamp.ok {
        problems.push("the task's validation failed".to_owned());
    }
    if let Some(why) = &stamp.quarantined {
        problems.push(format!("the task is quarantined: {why}"));
    }
    match stamp.validated_probes() {
        None => problems.push("validation.json records no probe digest".to_owned()),
        Some(validated) if !power.carries(validated, probes) => problems.push(format!(
            "the probes are not those validated (validated {}, these {})",
            short(validated),
            short(probes)
        )),
        Some(_) => {}
    }
    if let Some(validated) = &stamp.task_sha256
        && validated != manifest
    {
        problems.push(format!(
            "task.toml is not the one validated (validated {}, this {})",
            short(validated),
            short(manifest)
        ));
    }
    problems
}

/// `sha256:…` of a task.toml's bytes, as validation records it.
pub fn manifest_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

fn short(digest: &str) -> &str {
    &digest[..digest.len().min("sha256:".len() + 12)]
}

/// Reads every file under the probe directory as (relative path, bytes), for the digest.
pub fn read_probe_files(dir: &Path) -> std::io::Result<Vec<(String, Vec<u8>)>> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, Vec<u8>)>) -> std::io::Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            if name == "__pycache__" || name.ends_with(".pyc") {
                continue;
            }
            if path.is_dir() {
                walk(root, &path, out)?;
            } else {
                let rel = path.strip_prefix(root).unwrap_or(&path);
                out.push((rel.to_string_lossy().into_owned(), std::fs::read(&path)?));
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out)?;
    Ok(out)
}

/// SHA-256 over every probe file (relative path, length, bytes), in path order: a record
/// computed against other probes no longer holds.
pub fn probes_digest(files: &[(String, Vec<u8>)]) -> String {
    let mut sorted: Vec<&(String, Vec<u8>)> = files.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    let mut h = Sha256::new();
    for (path, bytes) in sorted {
        h.update(path.as_bytes());
        h.update([0]);
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    }
    format!("sha256:{}", hex::encode(h.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(json: &str) -> ValidationStamp {
        serde_json::from_str(json).unwrap()
    }

    fn none() -> crate::task::PowerConfig {
        crate::task::PowerConfig {
            threshold: 0.9,
            equivalent: Vec::new(),
            out_of_scope: Vec::new(),
            only: Vec::new(),
            port: Vec::new(),
        }
    }

    #[test]
    fn a_reviewed_port_is_what_was_validated() {
        let good = stamp(r#"{"ok":true,"probes_digest":"sha256:aaa"}"#);
        let mut ported = none();
        ported.port.push(crate::task::ProbePort {
            from: "sha256:aaa".into(),
            to: "sha256:bbb".into(),
            reason: "same requests".into(),
        });
        assert!(stamp_problems(Some(&good), "sha256:bbb", "sha256:t", &ported).is_empty());
        assert!(!stamp_problems(Some(&good), "sha256:ccc", "sha256:t", &ported).is_empty());
    }

    #[test]
    fn only_what_was_validated_passes() {
        let good = stamp(
            r#"{"ok":true,"images":[{"tag":"env:1","id":"x"}],"power":{"probes_digest":"sha256:aaa"}}"#,
        );
        assert!(stamp_problems(Some(&good), "sha256:aaa", "sha256:t", &none()).is_empty());
        let cases: Vec<(Option<ValidationStamp>, &str, &str)> = vec![
            (None, "sha256:aaa", "no validation.json"),
            (Some(good.clone()), "sha256:bbb", "not those validated"),
            (
                Some(stamp(r#"{"ok":false,"probes_digest":"sha256:aaa"}"#)),
                "sha256:aaa",
                "validation failed",
            ),
            (
                Some(stamp(
                    r#"{"ok":true,"quarantined":"flaky","probes_digest":"sha256:aaa"}"#,
                )),
                "sha256:aaa",
                "quarantined: flaky",
            ),
            (
                Some(stamp(r#"{"ok":true}"#)),
                "sha256:aaa",
                "no probe digest",
            ),
        ];
        for (s, probes, want) in cases {
            let got = stamp_problems(s.as_ref(), probes, "sha256:t", &none());
            assert!(got.iter().any(|p| p.contains(want)), "{want}: {got:?}");
        }
        let edited = stamp(r#"{"ok":true,"probes_digest":"sha256:aaa","task_sha256":"sha256:t"}"#);
        assert!(stamp_problems(Some(&edited), "sha256:aaa", "sha256:t", &none()).is_empty());
        let got = stamp_problems(Some(&edited), "sha256:aaa", "sha256:u", &none());
        assert!(
            got.iter()
                .any(|p| p.contains("task.toml is not the one validated")),
            "{got:?}"
        );
    }

    #[test]
    fn validation_s_own_digest_wins_over_the_power_record_s() {
        let s = stamp(
            r#"{"ok":true,"probes_digest":"sha256:new","power":{"probes_digest":"sha256:old"}}"#,
        );
        assert_eq!(s.validated_probes(), Some("sha256:new"));
    }
}
