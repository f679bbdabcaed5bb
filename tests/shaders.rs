//! Every WGSL shader parses and validates with naga (no GPU needed).

use tpusim::exec::gpu::SHADERS;

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
    assert!(!on_disk.is_empty());
    for name in &on_disk {
        assert!(
            SHADERS.iter().any(|(n, _)| n == name),
            "shaders/{name} is not registered in SHADERS"
        );
    }
    for (name, src) in SHADERS {
        let module = naga::front::wgsl::parse_str(src)
            .unwrap_or_else(|e| panic!("{name} does not parse: {}", e.emit_to_string(src)));
        naga::valid::Validator::new(
            naga::valid::ValidationFlags::all(),
            naga::valid::Capabilities::empty(),
        )
        .validate(&module)
        .unwrap_or_else(|e| panic!("{name} does not validate: {e:?}"));
    }
}
