//! A topic's grants and outbound-HTTP limits, checked against the machine:
//! granted variables are set, granted folders and CA files exist.

use std::path::Path;

use super::{DirGrant, Grants, HttpGrant, HttpLimits, MAX_RESPONSE, raw};

/// Check a topic's grants against the machine: every named variable is set,
/// every directory exists. Host paths resolve against the config's folder.
pub(super) fn resolve_grants(
    raw: &raw::RawGrants,
    base: &Path,
    topic: &str,
) -> Result<Grants, (std::ops::Range<usize>, String)> {
    let mut grants = Grants::default();
    for name in raw.env.iter().flatten() {
        let var = name.get_ref();
        if var.is_empty() || var.contains('=') || var.contains('\0') {
            return Err((
                name.span(),
                format!("field `grants.env`: topic {topic:?}: {var:?} is not a variable name"),
            ));
        }
        match std::env::var(var) {
            Ok(value) => grants.env.push((var.clone(), value)),
            Err(_) => {
                return Err((
                    name.span(),
                    format!(
                        "field `grants.env`: topic {topic:?} is granted ${var}, which is not set (or not UTF-8) in the runner's environment"
                    ),
                ));
            }
        }
    }
    for dir in raw.dirs.iter().flatten() {
        let d = dir.get_ref();
        let host = base.join(&d.host);
        if !host.is_dir() {
            return Err((
                dir.span(),
                format!(
                    "field `grants.dirs`: topic {topic:?} is granted {}, which is not a directory",
                    host.display()
                ),
            ));
        }
        if !d.guest.starts_with('/') {
            return Err((
                dir.span(),
                format!(
                    "field `grants.dirs`: topic {topic:?}: guest path {:?} must be absolute, e.g. \"/data\"",
                    d.guest
                ),
            ));
        }
        grants.dirs.push(DirGrant {
            host,
            guest: d.guest.clone(),
            write: d.write,
        });
    }
    for grant in raw.http.iter().flatten() {
        let parsed = HttpGrant::parse(grant.get_ref()).map_err(|why| {
            (
                grant.span(),
                format!("field `grants.http`: topic {topic:?}: {why}"),
            )
        })?;
        grants.http.push(parsed);
    }
    Ok(grants)
}

/// A topic's `http` limits: its own fields, else `[defaults]`' fields, else
/// the built-in defaults. An extra CA file must hold at least one PEM certificate.
pub(super) fn resolve_http(
    defaults: Option<&toml::Spanned<raw::RawHttp>>,
    own: Option<&toml::Spanned<raw::RawHttp>>,
    base: &Path,
    topic: &str,
) -> Result<HttpLimits, (std::ops::Range<usize>, String)> {
    let mut limits = HttpLimits::default();
    for layer in [defaults, own].into_iter().flatten() {
        let span = layer.span();
        let raw = layer.get_ref();
        if let Some(d) = raw.connect_timeout {
            limits.connect_timeout = d.0;
        }
        if let Some(d) = raw.first_byte_timeout {
            limits.first_byte_timeout = d.0;
        }
        if let Some(n) = raw.max_concurrent {
            limits.max_concurrent = n.0;
        }
        if let Some(size) = raw.max_response {
            if !(1..=MAX_RESPONSE).contains(&size.0) {
                return Err((
                    span,
                    format!(
                        "field `http.max_response`: topic {topic:?}: between 1 byte and {} MiB",
                        MAX_RESPONSE >> 20
                    ),
                ));
            }
            limits.max_response = size.0;
        }
        if let Some(ca) = &raw.tls_ca {
            let path = base.join(ca);
            check_pem_certs(&path).map_err(|why| {
                (
                    span.clone(),
                    format!("field `http.tls_ca`: topic {topic:?}: {why}"),
                )
            })?;
            limits.tls_ca = Some(path);
        }
    }
    Ok(limits)
}

/// A readable PEM file with at least one certificate in it.
fn check_pem_certs(path: &Path) -> Result<(), String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut count = 0;
    for cert in CertificateDer::pem_slice_iter(&bytes) {
        cert.map_err(|e| format!("{} is not a PEM certificate file: {e}", path.display()))?;
        count += 1;
    }
    if count == 0 {
        return Err(format!("{} holds no PEM certificate", path.display()));
    }
    Ok(())
}
