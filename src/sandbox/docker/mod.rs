//! The Docker executor: the only module that names bollard.

mod executor;
mod image;
mod pip_log;
mod ranks;
mod reaper;

pub use executor::DockerExecutor;
pub use image::{EnvImage, PipLayer, image_exists, layer_file};
