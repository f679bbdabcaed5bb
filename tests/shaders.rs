//! Every WGSL shader parses and validates with naga (no GPU needed), as its module is
//! made: the generated constants, `common.wgsl`, then the kernel.

use tpusim::device_sim::gpu::shaders::{assembled, PARTS, SHADERS};

#[test]
fn every_shader_in_the_folder_is_registered_and_valid() {
    let on_disk: Vec<String> = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/shaders"))
        .expect("shaders/ exists")
        .map(|e| {
            e.expect("dir entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|n| n.ends_with(".wgsl"))
        .collect();
    assert!(on_disk.iter().any(|n| n == "common.wgsl"));
    for name in on_disk.iter().filter(|n| *n != "common.wgsl") {
        assert!(
            SHADERS.iter().chain(PARTS).any(|(n, _)| n == name),
            "shaders/{name} is not registered in SHADERS or PARTS"
        );
    }
    for (name, _) in SHADERS {
        let src = assembled(name);
        let module = naga::front::wgsl::parse_str(&src)
            .unwrap_or_else(|e| panic!("{name} does not parse: {}", e.emit_to_string(&src)));
        naga::valid::Validator::new(
            naga::valid::ValidationFlags::all(),
            naga::valid::Capabilities::empty(),
        )
        .validate(&module)
        .unwrap_or_else(|e| panic!("{name} does not validate: {e:?}"));
    }
}

#[test]
fn shaders_name_codes_instead_of_repeating_them() {
    // The combine rule lives in common.wgsl alone; op and dtype codes come from Rust.
    for (name, src) in SHADERS.iter().chain(PARTS) {
        for needle in [
            "fn combine_f32",
            "fn combine_i32",
            "OP == 1u",
            "OP == 2u",
            "DTYPE == 1u",
        ] {
            assert!(!src.contains(needle), "{name} repeats `{needle}`");
        }
        assert!(
            !src.contains("workgroup_size(256)"),
            "{name}: use WORKGROUP"
        );
    }
}
