//! The WGSL sources as modules get them: the constants of `codes.rs`, then
//! `shaders/common.wgsl`, then the kernel (WGSL has no #include).

use super::codes::wgsl_consts;

/// `shaders/common.wgsl`: the parameter block, the reduction rule, the grid stride.
pub const COMMON_WGSL: &str = include_str!("../../../shaders/common.wgsl");

/// Every kernel, by file name, as written (without the prelude).
pub const SHADERS: &[(&str, &str)] = &[
    (
        "accumulate.wgsl",
        include_str!("../../../shaders/accumulate.wgsl"),
    ),
    (
        "accumulate_vec4.wgsl",
        include_str!("../../../shaders/accumulate_vec4.wgsl"),
    ),
    (
        "accumulate_batch.wgsl",
        include_str!("../../../shaders/accumulate_batch.wgsl"),
    ),
    ("fill.wgsl", include_str!("../../../shaders/fill.wgsl")),
    (
        "schedule.wgsl",
        include_str!("../../../shaders/schedule.wgsl"),
    ),
    ("halves.wgsl", include_str!("../../../shaders/halves.wgsl")),
];

/// The module source of kernel `name` (a file name in [`SHADERS`]): constants, common
/// part, kernel.
///
/// # Panics
/// When `name` is not in [`SHADERS`].
pub fn assembled(name: &str) -> String {
    let (_, kernel) = SHADERS
        .iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no shader named {name}"));
    format!("{}\n{COMMON_WGSL}\n{kernel}", wgsl_consts())
}
