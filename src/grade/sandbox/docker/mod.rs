//! The Docker executor: the only module that names bollard.

mod container;
mod env_bench;
mod executor;
mod image;
mod pip_log;
mod ranks;
mod reaper;

pub use env_bench::{
    BENCH_NAMESPACE, EnvBench, EnvMode, ImageLayers, Layer, Storage, common_layers, merge_layers,
    unique_bytes,
};
pub use executor::DockerExecutor;
pub use image::{EnvImage, PipLayer, image_exists, layer_file};
pub use reaper::{RunReaper, remove_run};
