//! Ranks on two hosts: two Linux network namespaces, each with its own host name and
//! address on a virtual Ethernet pair, stand in for two machines, and Open MPI starts
//! the remote rank through a launcher agent (`plm_rsh_agent`) that enters the other
//! namespace, as `ssh` would enter the other host. Nothing is shared but the file
//! system, so the ranks exchange over TCP as on a cluster. A run gives 0 wrong and an
//! `apply` the single-process result byte for byte. Skipped (with a note) where this
//! machine cannot make network namespaces (no `ip`, not root).
#![cfg(feature = "mpi")]

use std::path::Path;
use std::process::Command;

fn tpusim() -> &'static str {
    env!("CARGO_BIN_EXE_tpusim")
}

fn ip(args: &[&str]) -> Result<(), String> {
    let o = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run ip: {e}"))?;
    if o.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr).trim()
        ))
    }
}

/// Two namespaces joined by a veth pair; removed (with the pair) when dropped.
struct TwoHosts {
    ns: [String; 2],
    addr: [String; 2],
}

impl TwoHosts {
    fn new() -> Result<Self, String> {
        let id = std::process::id();
        let ns = [format!("tpusim-{id}-a"), format!("tpusim-{id}-b")];
        let net = 10 + id % 200;
        let addr = [format!("10.79.{net}.1"), format!("10.79.{net}.2")];
        ip(&["netns", "add", &ns[0]])?;
        let hosts = TwoHosts { ns, addr };
        ip(&["netns", "add", &hosts.ns[1]])?;
        let veth = [
            format!("tpa{}", id % 100_000),
            format!("tpb{}", id % 100_000),
        ];
        ip(&[
            "link", "add", &veth[0], "type", "veth", "peer", "name", &veth[1],
        ])?;
        for ((v, ns), addr) in veth.iter().zip(&hosts.ns).zip(&hosts.addr) {
            ip(&["link", "set", v, "netns", ns])?;
            ip(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", v])?;
            ip(&["-n", ns, "link", "set", v, "up"])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        Ok(hosts)
    }

    /// `mpirun -np 2` over both hosts (one rank each), started on the first, running
    /// `cmd`; its exit code, stdout and stderr.
    fn mpirun(&self, dir: &Path, cmd: &[&str]) -> (i32, String, String) {
        let agent = dir.join("rsh");
        let cases = (0..2)
            .map(|i| {
                format!(
                    "  {}) ns={}; name=node{} ;;\n",
                    self.addr[i],
                    self.ns[i],
                    i + 1
                )
            })
            .collect::<String>();
        // The agent gets the host, then the command line to run there (one string).
        std::fs::write(
            &agent,
            format!(
                "#!/bin/sh\nhost=$1; shift\ncase \"$host\" in\n{cases}  *) echo \"unknown host $host\" >&2; exit 1 ;;\nesac\n\
                 exec ip netns exec \"$ns\" unshare --uts sh -c \"echo $name > /proc/sys/kernel/hostname; $*\"\n"
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();
        let hostfile = dir.join("hosts");
        std::fs::write(
            &hostfile,
            format!("{} slots=1\n{} slots=1\n", self.addr[0], self.addr[1]),
        )
        .unwrap();
        let mpirun = [
            "mpirun",
            "--allow-run-as-root",
            "--hostfile",
            hostfile.to_str().unwrap(),
            "-np",
            "2",
            "--map-by",
            "node",
            "--mca",
            "plm_rsh_agent",
            agent.to_str().unwrap(),
        ]
        .iter()
        .chain(cmd)
        .map(|a| format!("'{a}'"))
        .collect::<Vec<_>>()
        .join(" ");
        let o = Command::new("timeout")
            .args([
                "120",
                "ip",
                "netns",
                "exec",
                &self.ns[0],
                "unshare",
                "--uts",
            ])
            .args([
                "sh",
                "-c",
                &format!("echo node1 > /proc/sys/kernel/hostname; exec {mpirun}"),
            ])
            .output()
            .expect("ip netns exec");
        (
            o.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    }
}

impl Drop for TwoHosts {
    fn drop(&mut self) {
        for ns in &self.ns {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}

#[test]
fn ranks_on_two_hosts_run_and_apply_as_one_process() {
    let hosts = match TwoHosts::new() {
        Ok(h) => h,
        Err(e) => {
            eprintln!("skipped: this machine cannot make network namespaces ({e})");
            return;
        }
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();

    // The ranks really are on two hosts: each names its own.
    let (rc, out, err) = hosts.mpirun(&dir, &["cat", "/proc/sys/kernel/hostname"]);
    assert_eq!(rc, 0, "{out}\n{err}");
    let mut names: Vec<&str> = out.lines().map(str::trim).collect();
    names.sort();
    assert_eq!(names, ["node1", "node2"], "{out}\n{err}");

    let (rc, out, err) = hosts.mpirun(
        &dir,
        &[
            tpusim(),
            "run",
            "psum",
            "-p",
            "4",
            "--shape",
            "64x128",
            "--backend",
            "cpu",
        ],
    );
    assert_eq!(rc, 0, "{out}\n{err}");
    assert!(out.contains("x 2 ranks: 0 wrong of 32768"), "{out}\n{err}");

    // apply over the two hosts writes what one process writes.
    let input = dir.join("x.npy");
    let a = tpusim::HostArray {
        dtype: tpusim::DType::F32,
        shape: vec![4 * 16, 128],
        words: (0..4 * 16 * 128u32)
            .map(|i| tpusim::DType::F32.bits_of(((i * 7919) % 97) as f64 - 40.0))
            .collect(),
    };
    tpusim::npy::write_npy(&input, &a).unwrap();
    let one = dir.join("one.npy");
    let two = dir.join("two.npy");
    let o = Command::new(tpusim())
        .args(["apply", "psum", "-p", "4", "--backend", "cpu", "--input"])
        .arg(&input)
        .arg("--output")
        .arg(&one)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (rc, out, err) = hosts.mpirun(
        &dir,
        &[
            tpusim(),
            "apply",
            "psum",
            "-p",
            "4",
            "--backend",
            "cpu",
            "--input",
            input.to_str().unwrap(),
            "--output",
            two.to_str().unwrap(),
        ],
    );
    assert_eq!(rc, 0, "{out}\n{err}");
    assert_eq!(
        std::fs::read(&one).unwrap(),
        std::fs::read(&two).unwrap(),
        "{out}\n{err}"
    );
}
