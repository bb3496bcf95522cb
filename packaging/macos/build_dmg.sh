#!/usr/bin/env bash
# FlashChat.app -> FlashChat-VERSION.dmg on a Mac (Apple silicon). Written and checked by
# reading only: it has not been run on a Mac. Usage, from the repository root:
#   make package                      # PyInstaller: dist/FlashChat.app
#   bash packaging/macos/build_dmg.sh [SIGNING_IDENTITY]
# Without an identity the app is signed ad hoc ("-"): it runs on the Mac that built it, and
# elsewhere only after the user allows it in System Settings > Privacy & Security.
# With a Developer ID ("Developer ID Application: NAME (TEAMID)"), notarise afterwards:
#   xcrun notarytool submit dist/FlashChat-VERSION.dmg --keychain-profile PROFILE --wait
#   xcrun stapler staple dist/FlashChat-VERSION.dmg
# (create PROFILE once with `xcrun notarytool store-credentials`).
set -euo pipefail
IDENTITY=${1:--}
APP=dist/FlashChat.app
[[ -d "$APP" ]] || { echo "no $APP: run 'make package' first" >&2; exit 2; }
[[ "$(uname -m)" == "arm64" ]] || { echo "FlashChat.app is built for Apple silicon only" >&2; exit 2; }
VERSION=$(/usr/libexec/PlistBuddy -c "Print :CFBundleShortVersionString" "$APP/Contents/Info.plist")
OPTIONS=(--force --deep --timestamp --options runtime --sign "$IDENTITY")
[[ "$IDENTITY" == "-" ]] && OPTIONS=(--force --deep --sign -)
codesign "${OPTIONS[@]}" "$APP"
codesign --verify --deep --strict --verbose=2 "$APP"
STAGE=$(mktemp -d)
cp -R "$APP" "$STAGE/"
ln -s /Applications "$STAGE/Applications"  # drag the app onto it
hdiutil create -volname "FlashChat $VERSION" -srcfolder "$STAGE" -ov -format UDZO \
  "dist/FlashChat-$VERSION.dmg"
rm -rf "$STAGE"
[[ "$IDENTITY" == "-" ]] || codesign --sign "$IDENTITY" --timestamp "dist/FlashChat-$VERSION.dmg"
echo "dist/FlashChat-$VERSION.dmg"
