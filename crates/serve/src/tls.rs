//! Keys and TLS: the first-setup command's CA, server and client
//! certificates (in the file layout of stenographer's `stenokeys.sh`, so
//! `stenocurl`/`stenoread` find them through a stenographer-style `config`),
//! and the rustls configurations of the server (a client certificate signed
//! by the CA is required) and of the many-sensor client.
//!
//! Layout of the certificate directory: `ca_cert.pem`, `ca_key.pem` (0600),
//! `server_cert.pem`, `server_key.pem` (0600), `client_cert.pem`,
//! `client_key.pem` (0640), and `config` (`Host`, `Port`, `CertPath`, read
//! by stenocurl). ECDSA P-256 keys, made with rcgen on ring.

use std::fs;
use std::io::Write;
use std::net::IpAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose, SanType,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn write_file(path: &Path, data: &str, mode: u32) -> Result<(), String> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    f.write_all(data.as_bytes())
        .map_err(|e| format!("{}: {e}", path.display()))
}

fn ca_params() -> Result<CertificateParams, String> {
    let mut p = CertificateParams::new(Vec::<String>::new()).map_err(|e| e.to_string())?;
    p.distinguished_name
        .push(DnType::OrganizationName, "ringcap");
    p.distinguished_name
        .push(DnType::CommonName, "ringcap retrieval CA");
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    Ok(p)
}

/// The CA of `dir`, able to sign (its certificate re-made from its key:
/// same name and key, so what it signs chains to `ca_cert.pem`).
fn load_ca(dir: &Path) -> Result<(rcgen::Certificate, KeyPair), String> {
    let p = dir.join("ca_key.pem");
    let pem = fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
    let key = KeyPair::from_pem(&pem).map_err(|e| format!("{}: {e}", p.display()))?;
    let cert = ca_params()?.self_signed(&key).map_err(|e| e.to_string())?;
    Ok((cert, key))
}

fn leaf(
    names: &[String],
    cn: &str,
    usage: ExtendedKeyUsagePurpose,
    ca: &(rcgen::Certificate, KeyPair),
) -> Result<(String, String), String> {
    let mut p = CertificateParams::new(Vec::<String>::new()).map_err(|e| e.to_string())?;
    for n in names {
        p.subject_alt_names.push(match n.parse::<IpAddr>() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => SanType::DnsName(
                n.clone()
                    .try_into()
                    .map_err(|e| format!("name '{n}': {e}"))?,
            ),
        });
    }
    p.distinguished_name
        .push(DnType::OrganizationName, "ringcap");
    p.distinguished_name.push(DnType::CommonName, cn);
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    p.extended_key_usages = vec![usage];
    let key = KeyPair::generate().map_err(|e| e.to_string())?;
    let cert = p.signed_by(&key, &ca.0, &ca.1).map_err(|e| e.to_string())?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// First setup: a CA, a server certificate for `host` (plus `localhost`
/// and 127.0.0.1), a client certificate, and stenocurl's `config` naming
/// `host` and `port`. Refuses to overwrite any of them.
pub fn make_keys(dir: &Path, host: &str, port: u16) -> Result<(), String> {
    fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for f in ["ca_key.pem", "server_key.pem", "client_key.pem", "config"] {
        if dir.join(f).exists() {
            return Err(format!(
                "{}: exists; keys are made once (remove the directory to start again)",
                dir.join(f).display()
            ));
        }
    }
    let ca_key = KeyPair::generate().map_err(|e| e.to_string())?;
    let ca_cert = ca_params()?
        .self_signed(&ca_key)
        .map_err(|e| e.to_string())?;
    write_file(&dir.join("ca_key.pem"), &ca_key.serialize_pem(), 0o600)?;
    write_file(&dir.join("ca_cert.pem"), &ca_cert.pem(), 0o644)?;
    let ca = (ca_cert, ca_key);
    let mut names = vec![host.to_string()];
    for n in ["localhost", "127.0.0.1"] {
        if !names.iter().any(|x| x == n) {
            names.push(n.to_string());
        }
    }
    let (c, k) = leaf(&names, host, ExtendedKeyUsagePurpose::ServerAuth, &ca)?;
    write_file(&dir.join("server_cert.pem"), &c, 0o644)?;
    write_file(&dir.join("server_key.pem"), &k, 0o600)?;
    add_client(dir, "client")?;
    let abs = fs::canonicalize(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let config = format!(
        "{{\n  \"Host\": {},\n  \"Port\": {port},\n  \"CertPath\": {}\n}}\n",
        json_str(host),
        json_str(&abs.to_string_lossy())
    );
    write_file(&dir.join("config"), &config, 0o644)
}

/// Issues a server certificate for another sensor, named `name` only (a
/// DNS name or an address, as clients dial it), into `out`: its
/// `server_cert.pem`, `server_key.pem` (0600) and the CA's `ca_cert.pem`,
/// without the CA's key, so that `ringcap serve --certs OUT` runs on that
/// sensor and one client directory (the CA's) reaches every sensor, while
/// no sensor can make certificates for another's name.
pub fn add_sensor(dir: &Path, name: &str, out: &Path) -> Result<(), String> {
    let ca = load_ca(dir)?;
    fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    for f in ["server_cert.pem", "server_key.pem", "ca_cert.pem"] {
        if out.join(f).exists() {
            return Err(format!(
                "{}: exists; keys are made once",
                out.join(f).display()
            ));
        }
    }
    let (c, k) = leaf(
        &[name.to_string()],
        name,
        ExtendedKeyUsagePurpose::ServerAuth,
        &ca,
    )?;
    let p = dir.join("ca_cert.pem");
    let ca_pem = fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
    write_file(&out.join("ca_cert.pem"), &ca_pem, 0o644)?;
    write_file(&out.join("server_key.pem"), &k, 0o600)?;
    write_file(&out.join("server_cert.pem"), &c, 0o644)
}

/// Issues another client certificate, `NAME_cert.pem` and `NAME_key.pem`
/// (`client` makes stenocurl's `client_cert.pem`/`client_key.pem`).
pub fn add_client(dir: &Path, name: &str) -> Result<(), String> {
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(format!(
            "client name '{name}': use letters, digits, '-' and '_'"
        ));
    }
    let ca = load_ca(dir)?;
    let (c, k) = leaf(&[], name, ExtendedKeyUsagePurpose::ClientAuth, &ca)?;
    write_file(&dir.join(format!("{name}_cert.pem")), &c, 0o644)?;
    write_file(&dir.join(format!("{name}_key.pem")), &k, 0o640)
}

fn json_str(s: &str) -> String {
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let v: Vec<_> = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if v.is_empty() {
        return Err(format!("{}: no certificate", path.display()));
    }
    Ok(v)
}

fn key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| format!("{}: {e}", path.display()))
}

fn roots(path: &Path) -> Result<Arc<RootCertStore>, String> {
    let mut r = RootCertStore::empty();
    for c in certs(path)? {
        r.add(c).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(Arc::new(r))
}

/// The server's TLS: `server_cert.pem`/`server_key.pem` of `dir`, and a
/// client certificate signed by `ca_cert.pem` required.
pub fn server_config(dir: &Path) -> Result<Arc<ServerConfig>, String> {
    let p = provider();
    let verifier =
        WebPkiClientVerifier::builder_with_provider(roots(&dir.join("ca_cert.pem"))?, p.clone())
            .build()
            .map_err(|e| format!("client verifier: {e}"))?;
    let mut c = ServerConfig::builder_with_provider(p)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_client_cert_verifier(verifier)
        .with_single_cert(
            certs(&dir.join("server_cert.pem"))?,
            key(&dir.join("server_key.pem"))?,
        )
        .map_err(|e| format!("server certificate: {e}"))?;
    c.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(c))
}

/// The many-sensor client's TLS: trusts `ca_cert.pem` of `dir`, presents
/// `NAME_cert.pem`/`NAME_key.pem` (`client` by default).
pub fn client_config(dir: &Path, name: &str) -> Result<Arc<ClientConfig>, String> {
    let c = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots(&dir.join("ca_cert.pem"))?)
        .with_client_auth_cert(
            certs(&dir.join(format!("{name}_cert.pem")))?,
            key(&dir.join(format!("{name}_key.pem")))?,
        )
        .map_err(|e| format!("client certificate: {e}"))?;
    Ok(Arc::new(c))
}
