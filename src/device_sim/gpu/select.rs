//! Choosing the adapter from `WGPU_BACKEND` and `WGPU_ADAPTER_NAME`, without wgpu's
//! helper (which panics when the name matches nothing): an unknown backend name, or a
//! name or backend that matches no adapter, is an error that lists the adapters there are.

use crate::error::{Error, Result};

/// The names `WGPU_BACKEND` accepts (wgpu's `Backends::from_comma_list`).
const BACKEND_NAMES: [&str; 11] = [
    "vulkan", "vk", "dx12", "d3d12", "metal", "mtl", "opengl", "gles", "gl", "webgpu", "noop",
];

/// Checks a `WGPU_BACKEND` value: a comma-separated list of backend names wgpu knows.
pub fn check_backends(value: &str) -> Result<()> {
    let unknown: Vec<&str> = value
        .split(',')
        .map(str::trim)
        .filter(|b| !BACKEND_NAMES.contains(&b.to_lowercase().as_str()))
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    Err(Error::NoAdapter(format!(
        "WGPU_BACKEND=`{value}` names no backend wgpu knows ({}); use a comma-separated list of vulkan, metal, dx12, gl; {}",
        unknown
            .iter()
            .map(|b| format!("`{b}`"))
            .collect::<Vec<_>>()
            .join(", "),
        existing()
    )))
}

/// The instance tpusim uses: backends and flags from the environment.
pub fn instance() -> Result<wgpu::Instance> {
    if let Ok(v) = std::env::var("WGPU_BACKEND") {
        check_backends(&v)?;
    }
    Ok(wgpu::Instance::new(
        wgpu::InstanceDescriptor::new_without_display_handle_from_env(),
    ))
}

/// `name (backend, type)` of an adapter.
pub fn label(a: &wgpu::Adapter) -> String {
    let i = a.get_info();
    format!("{} ({:?}, {:?})", i.name, i.backend, i.device_type)
}

/// Every adapter on every backend, as `adapters there are: …` (or `there are none`).
fn existing() -> String {
    let all = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle());
    let names: Vec<String> = pollster::block_on(all.enumerate_adapters(wgpu::Backends::all()))
        .iter()
        .map(label)
        .collect();
    if names.is_empty() {
        "wgpu finds no adapter on any backend".into()
    } else {
        format!("the adapters there are: {}", names.join("; "))
    }
}

/// The adapter `WGPU_ADAPTER_NAME` names (a case-insensitive substring of its name), or
/// else the default one, among the backends `WGPU_BACKEND` allows.
pub fn choose(instance: &wgpu::Instance) -> Result<wgpu::Adapter> {
    choose_for(instance, None)
}

/// [`choose`] for the `local_rank`-th rank of a host (`None`: the only process): without
/// `WGPU_ADAPTER_NAME`, rank k takes the k-th of the host's GPUs (modulo their number,
/// CPU adapters only where there is no GPU), so each rank has its own adapter.
pub fn choose_for(instance: &wgpu::Instance, local_rank: Option<usize>) -> Result<wgpu::Adapter> {
    let backends = wgpu::Backends::from_env().unwrap_or(wgpu::Backends::all());
    let where_ = || match std::env::var("WGPU_BACKEND") {
        Ok(b) => format!(" with WGPU_BACKEND=`{b}`"),
        Err(_) => String::new(),
    };
    if let Ok(want) = std::env::var("WGPU_ADAPTER_NAME") {
        let needle = want.to_lowercase();
        let adapters = pollster::block_on(instance.enumerate_adapters(backends));
        return adapters
            .into_iter()
            .find(|a| a.get_info().name.to_lowercase().contains(&needle))
            .ok_or_else(|| {
                Error::NoAdapter(format!(
                    "WGPU_ADAPTER_NAME=`{want}` matches no adapter{}; {}",
                    where_(),
                    existing()
                ))
            });
    }
    if let Some(k) = local_rank {
        let all = pollster::block_on(instance.enumerate_adapters(backends));
        let gpus: Vec<_> = all
            .iter()
            .filter(|a| a.get_info().device_type != wgpu::DeviceType::Cpu)
            .collect();
        let pick = if gpus.is_empty() {
            all.get(k % all.len().max(1))
        } else {
            Some(gpus[k % gpus.len()])
        };
        if let Some(a) = pick {
            return Ok(a.clone());
        }
    }
    let options = wgpu::RequestAdapterOptions {
        power_preference: wgpu::PowerPreference::from_env().unwrap_or_default(),
        ..Default::default()
    };
    pollster::block_on(instance.request_adapter(&options)).map_err(|e| {
        Error::NoAdapter(format!(
            "{e}{}; {}; install a GPU driver or Debian's mesa-vulkan-drivers (lavapipe)",
            where_(),
            existing()
        ))
    })
}

/// What kind of adapter `--backend gpu` would open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Found {
    /// A hardware adapter (any device type but `Cpu`), with its [`label`].
    Hardware(String),
    /// A software adapter (device type `Cpu`: llvmpipe/lavapipe, SwiftShader, WARP).
    Software(String),
    /// No adapter at all.
    None,
}

/// The kind of the adapter [`choose`] picks (wgpu prefers hardware adapters to software
/// ones, so `Software` means there is no hardware one, or `WGPU_ADAPTER_NAME` names a
/// software one), without opening it. Errors as [`choose`] when `WGPU_BACKEND` is
/// unknown or `WGPU_ADAPTER_NAME` matches nothing.
pub fn software_or_hardware() -> Result<Found> {
    let inst = instance()?;
    match choose(&inst) {
        Ok(a) if a.get_info().device_type == wgpu::DeviceType::Cpu => {
            Ok(Found::Software(label(&a)))
        }
        Ok(a) => Ok(Found::Hardware(label(&a))),
        Err(e) if std::env::var_os("WGPU_ADAPTER_NAME").is_some() => Err(e),
        Err(_) => Ok(Found::None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_lists_are_checked() {
        assert!(check_backends("vulkan").is_ok());
        assert!(check_backends("Vulkan, gl").is_ok());
        let e = check_backends("vulcan,gl").unwrap_err().to_string();
        assert!(e.contains("`vulcan`") && !e.contains("`gl`"), "{e}");
        assert!(check_backends("").is_err());
    }
}
