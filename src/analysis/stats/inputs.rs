//! What a set of samples was read from: enough to tell later whether two sets of statistics
//! were built from the same grades. Pure data; the readers live in `commands::source`.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The grades behind a set of statistics.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Inputs {
    /// A folder of run records and grade reports (`--reports`).
    Reports {
        /// The folder, as given.
        folder: String,
        /// Every file counted, relative to the folder, in path order.
        files: Vec<InputFile>,
        /// Run reports below the folder: summaries of records already counted, left out.
        summaries: usize,
        /// Files below the folder that are neither records nor reports, relative to it.
        skipped: Vec<String>,
    },
    /// The grades the App stored (`--store`, `--config`).
    Store {
        /// The store's URL, without its password.
        store: String,
        /// Every finished job counted, oldest first.
        jobs: Vec<InputJob>,
    },
}

/// One stored job a sample was read from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputJob {
    pub id: i64,
    /// SHA-256 of its stored report, lowercase hex (of nothing when it could not be graded).
    pub sha256: String,
}

/// One file a sample was read from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputFile {
    pub path: String,
    /// SHA-256 of its bytes, lowercase hex.
    pub sha256: String,
}

impl Inputs {
    /// `sha256:<hex>` over one line per counted file, `<sha256>  <path>\n` in path order (the
    /// lines `sha256sum` prints): equal for the same grades, whatever the folder is called.
    pub fn digest(&self) -> String {
        let mut h = Sha256::new();
        match self {
            Inputs::Reports { files, .. } => {
                for f in files {
                    h.update(format!("{}  {}\n", f.sha256, f.path).as_bytes());
                }
            }
            Inputs::Store { jobs, .. } => {
                for j in jobs {
                    h.update(format!("{}  job/{}\n", j.sha256, j.id).as_bytes());
                }
            }
        }
        format!("sha256:{}", hex::encode(h.finalize()))
    }

    /// How many records or reports were counted.
    pub fn count(&self) -> usize {
        match self {
            Inputs::Reports { files, .. } => files.len(),
            Inputs::Store { jobs, .. } => jobs.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reports(files: &[(&str, &str)]) -> Inputs {
        Inputs::Reports {
            folder: "runs".into(),
            files: files
                .iter()
                .map(|(p, s)| InputFile {
                    path: (*p).into(),
                    sha256: (*s).into(),
                })
                .collect(),
            summaries: 0,
            skipped: vec![],
        }
    }

    #[test]
    fn the_digest_is_sha256sum_of_the_file_list_and_ignores_the_folder() {
        let a = reports(&[("r1/a.json", "00"), ("r1/b.json", "11")]);
        let mut b = a.clone();
        let Inputs::Reports { folder, .. } = &mut b else {
            unreachable!()
        };
        *folder = "/elsewhere".into();
        assert_eq!(a.digest(), b.digest());
        // `printf '00  r1/a.json\n11  r1/b.json\n' | sha256sum`
        assert_eq!(
            a.digest(),
            format!(
                "sha256:{}",
                hex::encode(Sha256::digest(b"00  r1/a.json\n11  r1/b.json\n"))
            )
        );
        assert_ne!(a.digest(), reports(&[("r1/a.json", "00")]).digest());
        assert_ne!(
            a.digest(),
            reports(&[("r1/a.json", "00"), ("r1/b.json", "12")]).digest()
        );
        assert_eq!(a.count(), 2);
    }
}
