#!/usr/bin/env bash
# Trims a freshly debootstrapped rootfs (its path is $1) before it is tarred
# into the base image: package caches, docs, man pages, translations, the
# servers' Debian default instances, and PostgreSQL's JIT (LLVM, ~130 MB;
# without llvmjit.so PostgreSQL silently runs with jit off).
set -euo pipefail
root=${1:?usage: trim.sh ROOTFS}
cd "$root"

# Debian's package scripts ran under debootstrap's policy-rc.d, so nothing
# was started; keep one in the image so an `apt-get install` in a derived
# image does not try to start services either.
printf '#!/bin/sh\n# containers start their own processes\nexit 101\n' >usr/sbin/policy-rc.d
chmod 755 usr/sbin/policy-rc.d

# Later package installs in derived images skip docs too.
mkdir -p etc/dpkg/dpkg.cfg.d
cat >etc/dpkg/dpkg.cfg.d/01-nodoc <<'NODOC'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
NODOC

# Package caches and lists (apt-get update brings the lists back).
rm -rf var/cache/apt/* var/lib/apt/lists/* var/cache/debconf/*-old var/lib/dpkg/*-old
# Docs (copyright files kept), man and info pages, translations.
find usr/share/doc -mindepth 1 ! -name copyright ! -type d -delete
find usr/share/doc -mindepth 1 -type d -empty -delete
rm -rf usr/share/man/* usr/share/info/* usr/share/locale/* usr/share/lintian usr/share/postgresql/*/man

# The instances Debian's postinst scripts set up: PostgreSQL's "main"
# cluster (the image's entrypoint runs initdb into PGDATA instead), the
# snakeoil TLS key every container would share, and RabbitMQ's Erlang
# cookie (every container makes its own on first start, or takes
# RABBITMQ_ERLANG_COOKIE).
rm -rf var/lib/postgresql/[0-9]* etc/postgresql/[0-9]*/main var/log/postgresql/*
rm -f etc/ssl/private/ssl-cert-snakeoil.key etc/ssl/certs/ssl-cert-snakeoil.pem
rm -f var/lib/rabbitmq/.erlang.cookie

# PostgreSQL's LLVM JIT provider and LLVM itself (whichever majors the
# suite ships: bookworm PostgreSQL 15 and LLVM 14, trixie 17 and 19).
rm -rf usr/lib/postgresql/*/lib/llvmjit.so usr/lib/postgresql/*/lib/llvmjit_types.bc usr/lib/postgresql/*/lib/bitcode
rm -f usr/lib/x86_64-linux-gnu/libLLVM*.so* usr/lib/x86_64-linux-gnu/libz3.so*

# Logs of the installation, and files the container engine provides.
find var/log -type f -delete
rm -rf tmp/* var/tmp/* run/* dev/*
rm -f etc/hostname etc/resolv.conf etc/machine-id
: >etc/hosts
