#!/bin/sh
# The host's code, installed beside this folder (nothing of it is committed): the npm packages at the exact versions
# in package.json, and acp-kernel v0.0.29 + billion-context-dsh v0.2.10 cloned into vendor/ (neither is on the npm
# registry; clone them from GitHub: ranxianglei/acp-kernel, Tyan66666/billion-context-dsh) and acp-kernel built.
set -eu
mkdir -p vendor
[ -d vendor/acp-kernel ] || git clone -q https://github.com/ranxianglei/acp-kernel vendor/acp-kernel
[ -d vendor/billion-context-dsh ] || git clone -q https://github.com/Tyan66666/billion-context-dsh vendor/billion-context-dsh
git -C vendor/acp-kernel checkout -q v0.0.29
git -C vendor/billion-context-dsh checkout -q v0.2.10
(cd vendor/acp-kernel && npm install --no-audit --no-fund && npm run build)
npm install --no-audit --no-fund --legacy-peer-deps
