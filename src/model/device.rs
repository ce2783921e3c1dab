//! Choosing the candle device from the `model.device` setting.

use candle_core::Device;

use super::ModelError;
use crate::config::DeviceChoice;

/// The device for `choice`. `Auto` is CUDA 0 when built with the `cuda`
/// feature and a GPU answers, else the CPU. Asking for CUDA in a build
/// without it is an error that says how to get it.
pub fn select_device(choice: DeviceChoice) -> Result<Device, ModelError> {
    match choice {
        DeviceChoice::Cpu => Ok(Device::Cpu),
        DeviceChoice::Auto => {
            if cfg!(feature = "cuda") {
                if let Ok(d) = Device::new_cuda(0) {
                    return Ok(d);
                }
                tracing::info!("no CUDA device available; running on the CPU");
            }
            Ok(Device::Cpu)
        }
        DeviceChoice::Cuda(n) => {
            if !cfg!(feature = "cuda") {
                return Err(ModelError::DeviceUnavailable(
                    "this hearth was built without CUDA; rebuild with `--features cuda` or use --device cpu".into(),
                ));
            }
            Device::new_cuda(n).map_err(|e| ModelError::DeviceUnavailable(format!("CUDA device {n}: {e}")))
        }
    }
}
