//! The `nimbus-mock-lmi` binary (a DJL LMI container and SageMaker runtime) for a test: started
//! on a free loopback port, stopped on drop.

use anyhow::{bail, Context};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

pub struct MockLmi {
    child: Child,
    /// `http://127.0.0.1:PORT`
    pub url: String,
}

/// `NIMBUS_BIN_DIR`, else the target directory this test binary was built into.
fn mock_binary() -> anyhow::Result<PathBuf> {
    let dir = match std::env::var_os("NIMBUS_BIN_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => {
            let exe = std::env::current_exe()?;
            // target/<profile>/deps/<test binary>
            exe.parent()
                .and_then(|deps| deps.parent())
                .map(PathBuf::from)
                .context("test binary location")?
        }
    };
    let path = dir.join("nimbus-mock-lmi");
    if !path.is_file() {
        bail!(
            "{} not found: build it first (cargo build -p nimbus-bench --bin nimbus-mock-lmi)",
            path.display()
        );
    }
    Ok(path)
}

impl MockLmi {
    /// Start the mock with `--port 0` and read the address from its first stdout line.
    pub fn start() -> anyhow::Result<Self> {
        let program = mock_binary()?;
        let mut child = Command::new(&program)
            .args(["--port", "0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", program.display()))?;
        let stdout = child.stdout.take().context("mock stdout")?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        let Some(address) = line.trim().strip_prefix("listening on ") else {
            let _ = child.kill();
            bail!("unexpected first line from nimbus-mock-lmi: {line:?}");
        };
        Ok(Self {
            url: format!("http://{address}"),
            child,
        })
    }
}

impl Drop for MockLmi {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
