//! `infradev doctor`: one line per check of what grading needs, `ok`, `warn` or `FAIL`, with
//! what to do about a failure. Exit 0 when nothing failed, 3 otherwise.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::cli::exit;
use crate::grade::sandbox::docker::{DockerExecutor, image_exists};
use crate::task::Registry;

/// Check Docker, base images, tasks, git, the wheel cache and the local executor's Python.
#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// Wheel cache for tasks that install packages.
    #[arg(long, env = "INFRADEV_WHEELS")]
    pub wheels: Option<PathBuf>,
    /// The interpreter of the local executor.
    #[arg(long, env = "INFRADEV_PYTHON", default_value = "/usr/bin/python3")]
    pub python: PathBuf,
    /// The server's configuration: also check its store (connection and migrations) and
    /// that its GitHub API answers (what `serve` needs).
    #[arg(long)]
    pub config: Option<PathBuf>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Ok,
    Warn,
    Fail,
}

struct Checks {
    failed: usize,
}

impl Checks {
    fn line(&mut self, level: Level, what: &str, detail: impl AsRef<str>) {
        let tag = match level {
            Level::Ok => "ok  ",
            Level::Warn => "warn",
            Level::Fail => "FAIL",
        };
        self.failed += usize::from(level == Level::Fail);
        crate::outln!("{tag} {what}: {}", detail.as_ref());
    }
}

fn runs(program: &Path, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}

pub async fn doctor_command(root: &Path, args: DoctorArgs) -> u8 {
    let mut c = Checks { failed: 0 };
    let registry = Registry::load(root);
    let tasks: Vec<crate::task::Task> = match &registry {
        Ok(r) => {
            let problems = r.check();
            let n = r.tasks.len();
            if n == 0 {
                c.line(
                    Level::Fail,
                    "tasks",
                    format!("no task under {} (--root)", root.join("tasks").display()),
                );
            } else if problems.is_empty() {
                c.line(
                    Level::Ok,
                    "tasks",
                    format!("{n} task(s), every manifest valid"),
                );
            } else {
                c.line(
                    Level::Fail,
                    "tasks",
                    format!(
                        "{} problem(s) in {n} task(s); `infradev tasks check` lists them",
                        problems.len()
                    ),
                );
            }
            r.tasks.iter().flatten().cloned().collect()
        }
        Err(e) => {
            c.line(
                Level::Fail,
                "tasks",
                format!("cannot read {}: {e} (--root)", root.join("tasks").display()),
            );
            Vec::new()
        }
    };
    if root.join("runners/python/infradev_entry.py").is_file() {
        c.line(
            Level::Ok,
            "runners",
            root.join("runners/python").display().to_string(),
        );
    } else {
        c.line(
            Level::Fail,
            "runners",
            format!(
                "{} is missing (--root)",
                root.join("runners/python").display()
            ),
        );
    }
    if runs(Path::new("git"), &["--version"]) {
        c.line(Level::Ok, "git", "found");
    } else {
        c.line(
            Level::Fail,
            "git",
            "not found on PATH (apt-get install git)",
        );
    }
    match DockerExecutor::connect().await {
        Ok(docker) => {
            c.line(Level::Ok, "docker", "the Docker Engine answers");
            let images: BTreeSet<&str> = tasks
                .iter()
                .map(|t| t.environment.base_image.as_str())
                .collect();
            for image in images {
                if image_exists(&docker, image).await {
                    c.line(Level::Ok, "base image", image);
                } else {
                    c.line(
                        Level::Fail,
                        "base image",
                        format!("{image} is missing (runners/base-image/build.sh builds it)"),
                    );
                }
            }
        }
        Err(e) => c.line(
            Level::Fail,
            "docker",
            format!("{e:#} (runners/ensure-docker.sh starts it)"),
        ),
    }
    let need_wheels: Vec<&str> = tasks
        .iter()
        .filter(|t| !t.environment.packages.is_empty() || t.environment.layer.is_some())
        .map(|t| t.id.as_str())
        .collect();
    match (&args.wheels, need_wheels.is_empty()) {
        (Some(w), _) if w.is_dir() => c.line(Level::Ok, "wheel cache", w.display().to_string()),
        (Some(w), _) => c.line(
            Level::Fail,
            "wheel cache",
            format!(
                "{} is not a folder (`infradev tasks fetch` fills it)",
                w.display()
            ),
        ),
        (None, true) => c.line(Level::Ok, "wheel cache", "no task installs packages"),
        (None, false) => c.line(
            Level::Warn,
            "wheel cache",
            format!(
                "not given (--wheels, INFRADEV_WHEELS); needed by {}",
                need_wheels.join(", ")
            ),
        ),
    }
    layers(&mut c, root, &tasks);
    if let Some(path) = &args.config {
        server(&mut c, path).await;
    }
    if runs(&args.python, &["-c", "import pytest"]) {
        c.line(
            Level::Ok,
            "local executor",
            format!("{} has pytest", args.python.display()),
        );
    } else {
        c.line(
            Level::Warn,
            "local executor",
            format!(
                "{} cannot import pytest (only --executor local needs it)",
                args.python.display()
            ),
        );
    }
    if c.failed == 0 {
        exit::RESOLVED
    } else {
        crate::outln!("{} check(s) failed", c.failed);
        exit::INFRA
    }
}

/// The shared environment layers the tasks name: each needs its requirements file.
fn layers(c: &mut Checks, root: &Path, tasks: &[crate::task::Task]) {
    let named: BTreeSet<&str> = tasks
        .iter()
        .filter_map(|t| t.environment.layer.as_deref())
        .collect();
    for layer in named {
        let file = root
            .join("runners/layers")
            .join(layer)
            .join("requirements.txt");
        if file.is_file() {
            c.line(Level::Ok, "layer", layer);
        } else {
            let users: Vec<&str> = tasks
                .iter()
                .filter(|t| t.environment.layer.as_deref() == Some(layer))
                .map(|t| t.id.as_str())
                .collect();
            c.line(
                Level::Fail,
                "layer",
                format!(
                    "{layer}: {} is missing (needed by {})",
                    file.display(),
                    users.join(", ")
                ),
            );
        }
    }
}

/// What `serve` needs besides grading: its configuration, its store, GitHub's API.
async fn server(c: &mut Checks, path: &Path) {
    let config = match crate::service::config::ServerConfig::load(path) {
        Ok(config) => {
            c.line(Level::Ok, "config", path.display().to_string());
            config
        }
        Err(e) => {
            c.line(Level::Fail, "config", format!("{e:#}"));
            return;
        }
    };
    let url = &config.store.url;
    let shown = url.split('@').next_back().unwrap_or(url);
    match crate::service::store::check::check(url).await {
        Ok(s) => match s.applied {
            None => c.line(
                Level::Ok,
                "store",
                format!(
                    "{} {shown}: empty; `serve` applies migrations 1-{} on start",
                    s.backend.as_str(),
                    s.latest
                ),
            ),
            Some(v) if v == s.latest => c.line(
                Level::Ok,
                "store",
                format!("{} {shown}: schema {v}, up to date", s.backend.as_str()),
            ),
            Some(v) if v < s.latest => c.line(
                Level::Warn,
                "store",
                format!(
                    "{} {shown}: schema {v} of {}; `serve` migrates it on start",
                    s.backend.as_str(),
                    s.latest
                ),
            ),
            Some(v) => c.line(
                Level::Fail,
                "store",
                format!(
                    "{} {shown}: schema {v} is newer than this binary's {} (an older InfraDev)",
                    s.backend.as_str(),
                    s.latest
                ),
            ),
        },
        Err(e) => c.line(Level::Fail, "store", format!("{shown}: {e:#}")),
    }
    let api = &config.github.api_url;
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(5))
        .build();
    let answer = match client {
        Ok(client) => client.get(api).send().await.map(|r| r.status()),
        Err(e) => Err(e),
    };
    match answer {
        Ok(status) => c.line(
            Level::Ok,
            "github",
            format!("{api} answers (HTTP {})", status.as_u16()),
        ),
        Err(e) => c.line(
            Level::Fail,
            "github",
            format!("cannot reach {api}: {e} (github.api_url; serve needs it)"),
        ),
    }
}
