#!/usr/bin/env bash
# The real mailers tests/test_mailers.py sends with: PHP + PHPMailer, Ruby + its mail gem, curl,
# swaks, msmtp, Jakarta Mail with a JDK to compile its sender (about 120 MB of download, 40 s
# here, when no JDK is installed yet), Node.js + npm (Nodemailer from
# tests/mailers/node/package.json). Django comes with the Python test extras. Idempotent:
# installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/../.."

missing=()
command -v php >/dev/null 2>&1 || missing+=(php-cli)
[ -f /usr/share/php/libphp-phpmailer/autoload.php ] || missing+=(libphp-phpmailer)
command -v ruby >/dev/null 2>&1 || missing+=(ruby)
ruby -e 'require "mail"' >/dev/null 2>&1 || missing+=(ruby-mail)
command -v curl >/dev/null 2>&1 || missing+=(curl)
command -v swaks >/dev/null 2>&1 || missing+=(swaks)
command -v msmtp >/dev/null 2>&1 || missing+=(msmtp)
command -v javac >/dev/null 2>&1 || missing+=(default-jdk-headless)
[ -f /usr/share/java/jakarta-mail.jar ] || missing+=(libjakarta-mail-java)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "mailers: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Nodemailer: no lockfile (the newest release of the major in package.json, as a new app gets).
node_folder=tests/mailers/node
if [ ! -d "$node_folder/node_modules/nodemailer" ]; then
  echo "mailers: npm install in $node_folder"
  if [ "$(node -p 'process.versions.node.split(".")[0]')" -ge 20 ]; then
    (cd "$node_folder" && npm install --no-package-lock --no-audit --no-fund --loglevel=error)
  else
    # Nodemailer 10 declares node >= 20; 7 declares node >= 6 (for an older Debian nodejs).
    (cd "$node_folder" && npm install --no-package-lock --no-save --no-audit --no-fund \
      --loglevel=error "nodemailer@^7")
  fi
fi
echo "mailers: php $(php -r 'echo PHP_VERSION;'), ruby $(ruby -e 'print RUBY_VERSION'), node $(node --version)," \
  "$(swaks --version | head -1), $(msmtp --version | head -1), $(javac -version 2>&1)"
