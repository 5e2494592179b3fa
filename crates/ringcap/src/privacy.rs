//! The privacy options of `ringcap capture` (--anonymize, --mask) and
//! `ringcap anonymize-key`: the transforms themselves live in
//! `ringcap-privacy`; this turns options into them, with messages a user
//! can act on.

use crate::cli::{AnonymizeKeyArgs, CaptureArgs};
use crate::failure::Failure;
use ringcap_privacy::fields::FieldSet;
use ringcap_privacy::{Key, Privacy};
use ringcap_stages::TransformFactory;
use std::io::{IsTerminal, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};

/// The transforms --anonymize and --mask ask for (none without them).
pub fn transforms(a: &CaptureArgs) -> Result<Vec<TransformFactory>, Failure> {
    let mask = match &a.mask {
        Some(list) => FieldSet::parse(list).map_err(|e| Failure::usage(format!("--mask: {e}")))?,
        None => FieldSet::EMPTY,
    };
    let anonymize = match &a.anonymize {
        Some(path) => {
            let key = Key::load(path).map_err(Failure::usage)?;
            let fields = FieldSet::parse(&a.anonymize_fields)
                .map_err(|e| Failure::usage(format!("--anonymize-fields: {e}")))?;
            Some((key, fields))
        }
        None => None,
    };
    let p = Privacy::new(mask, anonymize).map_err(Failure::usage)?;
    Ok(if p.is_noop() {
        Vec::new()
    } else {
        vec![p.factory()]
    })
}

/// `ringcap anonymize-key [FILE]`.
pub fn anonymize_key(a: &AnonymizeKeyArgs) -> Result<i32, Failure> {
    let key = Key::generate().map_err(Failure::system)?;
    let text = key.to_file_text();
    match &a.file {
        Some(path) => {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(path)
                .map_err(|e| {
                    Failure::usage(format!(
                        "cannot create the key file {} (it must not exist yet): {e}",
                        path.display()
                    ))
                })?;
            f.write_all(text.as_bytes())
                .and_then(|()| f.sync_all())
                .map_err(|e| Failure::system(format!("cannot write {}: {e}", path.display())))?;
        }
        None => {
            let out = std::io::stdout();
            if out.is_terminal() {
                return Err(Failure::usage(
                    "refusing to print a key on a terminal: redirect it to a file \
                     (ringcap anonymize-key > KEYFILE) or name one (ringcap anonymize-key KEYFILE)",
                ));
            }
            // A shell creates `> KEYFILE` with the umask's mode (often 0644):
            // make it private before the key is in it.
            let fd = out
                .as_fd()
                .try_clone_to_owned()
                .map_err(|e| Failure::system(format!("standard output: {e}")))?;
            let file = std::fs::File::from(fd);
            let meta = file
                .metadata()
                .map_err(|e| Failure::system(format!("standard output: {e}")))?;
            if meta.is_file() {
                file.set_permissions(std::fs::Permissions::from_mode(0o600))
                    .map_err(|e| {
                        Failure::system(format!("cannot make the key file private: {e}"))
                    })?;
            }
            let mut lock = out.lock();
            lock.write_all(text.as_bytes())
                .and_then(|()| lock.flush())
                .map_err(|e| Failure::system(format!("cannot write the key: {e}")))?;
        }
    }
    Ok(0)
}
