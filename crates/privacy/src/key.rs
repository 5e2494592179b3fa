//! Anonymization keys: made fresh from the kernel's random source, stored
//! as 64 hexadecimal digits in a file only its owner may read, loaded with
//! checks. A key never appears in a message, a log or a `Debug` output.

use std::fmt;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// A 32-byte Crypto-PAn key.
#[derive(Clone, PartialEq, Eq)]
pub struct Key(pub(crate) [u8; 32]);

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Key(<secret>)")
    }
}

impl Key {
    /// A fresh random key.
    pub fn generate() -> Result<Key, String> {
        let mut k = [0u8; 32];
        getrandom::fill(&mut k).map_err(|e| format!("cannot read random bytes for a key: {e}"))?;
        Ok(Key(k))
    }

    /// A key from its bytes (tests, reference vectors).
    pub fn from_bytes(bytes: [u8; 32]) -> Key {
        Key(bytes)
    }

    /// The key as its file holds it: 64 hexadecimal digits and a newline.
    pub fn to_file_text(&self) -> String {
        let mut s: String = self.0.iter().map(|b| format!("{b:02x}")).collect();
        s.push('\n');
        s
    }

    /// Reads a key file: a regular file that neither group nor others may
    /// read or write, holding the key as 64 hexadecimal digits (with an
    /// optional final newline) or as its 32 raw bytes. Errors name the file
    /// and what to do, never the contents.
    pub fn load(path: &Path) -> Result<Key, String> {
        let shown = path.display();
        let mut f =
            File::open(path).map_err(|e| format!("cannot open the key file {shown}: {e}"))?;
        let meta = f
            .metadata()
            .map_err(|e| format!("cannot stat the key file {shown}: {e}"))?;
        if !meta.is_file() {
            return Err(format!("the key file {shown} is not a regular file"));
        }
        let mode = meta.mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(format!(
                "the key file {shown} may be read or written by others (mode {mode:04o}); \
                 make it private with: chmod 600 {shown}"
            ));
        }
        let mut buf = Vec::with_capacity(66);
        f.by_ref()
            .take(1024)
            .read_to_end(&mut buf)
            .map_err(|e| format!("cannot read the key file {shown}: {e}"))?;
        let wrong = || {
            format!(
                "the key file {shown} does not hold a key: want 64 hexadecimal digits \
                 (or 32 raw bytes), as `ringcap anonymize-key` writes; it has {} bytes",
                buf.len()
            )
        };
        if buf.len() == 32 {
            let mut k = [0u8; 32];
            k.copy_from_slice(&buf);
            return Ok(Key(k));
        }
        let text = buf.strip_suffix(b"\n").unwrap_or(&buf);
        if text.len() != 64 {
            return Err(wrong());
        }
        let mut k = [0u8; 32];
        for (i, pair) in text.chunks_exact(2).enumerate() {
            let hex = |c: u8| (c as char).to_digit(16);
            match (hex(pair[0]), hex(pair[1])) {
                (Some(h), Some(l)) => k[i] = (h * 16 + l) as u8,
                _ => return Err(wrong()),
            }
        }
        Ok(Key(k))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn write(dir: &Path, name: &str, bytes: &[u8], mode: u32) -> std::path::PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    }

    #[test]
    fn round_trip_and_checks() {
        let dir = std::env::temp_dir().join(format!("ringcap-key-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let k = Key::generate().unwrap();
        assert_ne!(k, Key::generate().unwrap());
        let text = k.to_file_text();
        let p = write(&dir, "ok", text.as_bytes(), 0o600);
        assert_eq!(Key::load(&p).unwrap(), k);
        let raw = write(&dir, "raw", &k.0, 0o400);
        assert_eq!(Key::load(&raw).unwrap(), k);

        let open = write(&dir, "open", text.as_bytes(), 0o644);
        let e = Key::load(&open).unwrap_err();
        assert!(e.contains("chmod 600") && e.contains("0644"), "{e}");
        assert!(!e.contains(&text[..16]), "the key leaked into: {e}");

        let short = write(&dir, "short", &text.as_bytes()[..40], 0o600);
        let e = Key::load(&short).unwrap_err();
        assert!(
            e.contains("64 hexadecimal digits") && !e.contains(&text[..16]),
            "{e}"
        );
        let bad = write(&dir, "bad", "zz".repeat(32).as_bytes(), 0o600);
        assert!(Key::load(&bad).is_err());
        let e = Key::load(&dir.join("missing")).unwrap_err();
        assert!(e.contains("cannot open the key file"), "{e}");
        assert_eq!(format!("{k:?}"), "Key(<secret>)");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
