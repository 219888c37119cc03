//! The shared execution environment, measured: every task's environment built twice from a
//! cold cache, as independent per-task images (each from the base with all its packages in one
//! layer) and with the shared layers InfraDev uses (`EnvImage::ensure`'s chain: base → shared
//! layer, built once for all tasks naming it → the task's packages). Prints, for both, the
//! storage (unique bytes: each layer counted once, as `docker system df` counts it) and the
//! build time, and the ratios.
//!
//! `cargo bench --bench env_sharing`. Needs Docker, the base images the tasks name
//! (`runners/base-image/build.sh`, `INFRADEV_BASE_SUITE=trixie runners/base-image/build.sh`)
//! and, when a task installs anything, the wheel cache filled by `infradev tasks fetch <ids>`
//! (`ENV_BENCH_CACHE=DIR`, the cache's root as `--cache` takes it; default: `$INFRADEV_CACHE`,
//! `$XDG_CACHE_HOME/infradev`, `~/.cache/infradev`). `ENV_BENCH_TASKS=a,b` picks tasks (default:
//! every task). Images are built under `infradev-bench/<mode>/` only: the real cache is never
//! used or touched; the bench's images are removed before (cold) and after.

use std::path::{Path, PathBuf};
use std::time::Instant;

use infradev::grade::sandbox::docker::{
    BENCH_NAMESPACE, EnvBench, EnvMode, ImageLayers, PipLayer, Storage, common_layers, unique_bytes,
};
use infradev::suite::fetch::Cache;
use infradev::task::{Registry, Task};

/// The order the modes are built in. Shared first, so that whatever the first mode warms
/// favours the independent baseline and the savings printed are, if anything, too low. What
/// is warmed: the host's page cache (the wheel files, the base image's files). What is not:
/// Docker's build cache, which these builds never consult: each layer is a container run from
/// its parent image and committed (`docker commit`, no Dockerfile), found again only by its own
/// tag, and the two modes' tags are in different namespaces. The `layers in both modes' images`
/// line checks it: the two modes should have only the base images' layers in common.
const MODES: [EnvMode; 2] = [EnvMode::Shared, EnvMode::Independent];

const GIB: f64 = (1u64 << 30) as f64;

fn main() {
    // `cargo test --all-targets` builds and runs bench targets too; measure only under `cargo bench`.
    if !std::env::args().any(|a| a == "--bench") {
        println!("env_sharing: not measuring outside `cargo bench`");
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    if let Err(e) = runtime.block_on(run()) {
        eprintln!("env_sharing: {e:#}");
        std::process::exit(1);
    }
}

/// What one mode gave.
struct Measured {
    mode: EnvMode,
    seconds: f64,
    images: Vec<ImageLayers>,
    storage: Storage,
    /// The same for the base images alone.
    bases: Storage,
}

async fn run() -> anyhow::Result<()> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let runners = root.join("runners");
    let tasks = pick_tasks(&root)?;
    // Every mode's layers before anything is built: a task the independent mode cannot merge
    // (one package pinned twice) fails here, not after an hour of builds.
    let mut installs = false;
    for task in &tasks {
        for mode in MODES {
            installs |= !mode.layers(task, &runners)?.is_empty();
        }
    }
    let cache = Cache::locate(std::env::var_os("ENV_BENCH_CACHE").map(PathBuf::from));
    let wheels = cache.wheels();
    if installs && !wheels.is_dir() {
        anyhow::bail!(
            "no wheel cache at {} (set ENV_BENCH_CACHE to the cache's root, or fill it with \
             `infradev tasks fetch {}`)",
            wheels.display(),
            tasks
                .iter()
                .map(|t| t.id.as_str())
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    let wheels = installs.then_some(wheels.as_path());

    let bench = EnvBench::connect().await?;
    println!(
        "env_sharing: {} task(s), {}; {} CPU(s); wheel cache {}",
        tasks.len(),
        bench.describe().await?,
        std::thread::available_parallelism().map_or(1, |c| c.get()),
        wheels.map_or("(not needed)".to_owned(), |w| w.display().to_string()),
    );
    let removed = bench.remove_images().await?;
    println!("  cold: {removed} image(s) under {BENCH_NAMESPACE} removed first");
    let result = measure(&bench, &tasks, &runners, wheels).await;
    let removed = bench.remove_images().await;
    let measured = result?;
    println!("  {} image(s) under {BENCH_NAMESPACE} removed", removed?);
    report(&tasks, &measured);
    Ok(())
}

/// The tasks `ENV_BENCH_TASKS` names (comma-separated), else every task, in registry order.
fn pick_tasks(root: &Path) -> anyhow::Result<Vec<Task>> {
    let registry = Registry::load(root)?;
    let mut all = Vec::new();
    for task in registry.tasks {
        all.push(task?);
    }
    let Ok(wanted) = std::env::var("ENV_BENCH_TASKS") else {
        return Ok(all);
    };
    let wanted: Vec<&str> = wanted
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if let Some(unknown) = wanted.iter().find(|w| !all.iter().any(|t| t.id == **w)) {
        anyhow::bail!("ENV_BENCH_TASKS: no task `{unknown}` under tasks/");
    }
    Ok(all
        .into_iter()
        .filter(|t| wanted.contains(&t.id.as_str()))
        .collect())
}

/// Builds every task's environment in each mode and reads the images' layers. Disk: a mode's
/// images are removed once read, so at most one mode's images exist at a time; independent
/// images, which share nothing but the base images, are removed one by one as soon as their
/// layers are read (seven independent torch images would take ~50 GiB at once). What is
/// counted does not change: storage is the union of the layers read, and the time is the sum
/// of the builds, never the removals.
async fn measure(
    bench: &EnvBench,
    tasks: &[Task],
    runners: &Path,
    wheels: Option<&Path>,
) -> anyhow::Result<Vec<Measured>> {
    let mut out = Vec::new();
    for mode in MODES {
        let mut seconds = 0.0;
        let mut images = Vec::new();
        let mut bases = Vec::new();
        for task in tasks {
            let t = Instant::now();
            let image = bench.build(mode, task, runners, wheels).await?;
            let took = t.elapsed().as_secs_f64();
            seconds += took;
            let layers = mode.layers(task, runners)?;
            println!(
                "  {:<12} {:<30} {:8.1} s  {} ({} pip layer(s): {})",
                mode.name(),
                task.id,
                took,
                image.tag,
                layers.len(),
                describe_layers(&layers)
            );
            images.push(bench.image_layers(&image.tag).await?);
            bases.push(bench.image_layers(&image.base_id).await?);
            if mode == EnvMode::Independent {
                bench.remove_images().await?;
            }
        }
        bench.remove_images().await?;
        for image in &images {
            let sum: u64 = image.layers.iter().map(|l| l.size).sum();
            if sum != image.reported_size {
                println!(
                    "  note: {} reports {} bytes, its layers {sum}",
                    image.image, image.reported_size
                );
            }
        }
        out.push(Measured {
            mode,
            seconds,
            storage: unique_bytes(&images),
            bases: unique_bytes(&bases),
            images,
        });
    }
    Ok(out)
}

fn describe_layers(layers: &[PipLayer]) -> String {
    if layers.is_empty() {
        return "the base image as is".to_owned();
    }
    layers
        .iter()
        .map(|l| {
            let n = l
                .requirements
                .lines()
                .filter(|r| !r.trim().is_empty() && !r.trim_start().starts_with('#'))
                .count();
            format!("{} {n} req.", l.repo)
        })
        .collect::<Vec<_>>()
        .join(" + ")
}

fn report(tasks: &[Task], measured: &[Measured]) {
    let get = |mode: EnvMode| {
        measured
            .iter()
            .find(|m| m.mode == mode)
            .expect("both modes measured")
    };
    let (shared, independent) = (get(EnvMode::Shared), get(EnvMode::Independent));
    println!(
        "env_sharing summary ({} task(s), cold, {} first; unique bytes count each layer once, \
         base images included):",
        tasks.len(),
        MODES[0].name()
    );
    println!(
        "  {:<12} {:>6} {:>6} {:>12} {:>15} {:>9}",
        "mode", "images", "layers", "unique GiB", "above base GiB", "build s"
    );
    for m in [independent, shared] {
        println!(
            "  {:<12} {:>6} {:>6} {:>12.3} {:>15.3} {:>9.1}",
            m.mode.name(),
            m.storage.images,
            m.storage.layers,
            m.storage.bytes as f64 / GIB,
            m.storage.bytes.saturating_sub(m.bases.bytes) as f64 / GIB,
            m.seconds
        );
    }
    let saved = |s: u64, i: u64| {
        if i == 0 {
            0.0
        } else {
            100.0 * (1.0 - s as f64 / i as f64)
        }
    };
    println!(
        "  storage saved by sharing: {:.1} % of unique bytes ({:.1} % above the base images); \
         shared / independent {:.3}",
        saved(shared.storage.bytes, independent.storage.bytes),
        saved(
            shared.storage.bytes.saturating_sub(shared.bases.bytes),
            independent
                .storage
                .bytes
                .saturating_sub(independent.bases.bytes)
        ),
        ratio(
            shared.storage.bytes as f64,
            independent.storage.bytes as f64
        )
    );
    println!(
        "  build time saved by sharing: {:.1} %; shared / independent {:.3}",
        100.0 * (1.0 - ratio(shared.seconds, independent.seconds)),
        ratio(shared.seconds, independent.seconds)
    );
    let common = common_layers(&shared.images, &independent.images);
    let bases_only = Storage {
        images: 0,
        ..shared.bases
    };
    let verdict = if common == bases_only {
        "the base images' only: nothing one mode built was reused by the other"
    } else {
        "MORE than the base images': one mode reused layers of the other"
    };
    println!(
        "  layers in both modes' images: {} ({:.3} GiB), {verdict}",
        common.layers,
        common.bytes as f64 / GIB
    );
}

fn ratio(a: f64, b: f64) -> f64 {
    if b == 0.0 { 1.0 } else { a / b }
}
