// Images the person attaches (file picker, paste, drag-and-drop) → data URLs for input_image.

const MAX_SIDE = 2048; // larger images are scaled down before sending
const KEEP_AS_IS_BYTES = 4 * 1024 * 1024; // smaller images in a common format go unchanged
const MAX_RAW_BYTES = 12 * 1024 * 1024; // base64 of this still fits the server's 16 MiB frame
const PLAIN_TYPES = new Set(["image/png", "image/jpeg", "image/webp", "image/gif"]);

function readAsDataUrl(blob) {
  return new Promise((resolve, reject) => {
    const r = new FileReader();
    r.onload = () => resolve(String(r.result));
    r.onerror = () => reject(new Error("the file could not be read"));
    r.readAsDataURL(blob);
  });
}

/**
 * A File → {name, dataUrl, width, height, decoded}. Throws an Error whose message can be shown.
 * An image this browser cannot decode is still sent as it is, so that the server's own
 * validation answers it (its error is then shown).
 */
export async function prepareImage(file) {
  const name = file.name || "pasted image";
  if (!file.type || !file.type.startsWith("image/")) throw new Error(`${name} is not an image`);
  let bitmap = null;
  try {
    bitmap = await createImageBitmap(file);
  } catch {
    bitmap = null;
  }
  if (bitmap === null) {
    if (file.size > MAX_RAW_BYTES) throw new Error(`${name} is too large to send (over 12 MB)`);
    return { name, dataUrl: await readAsDataUrl(file), width: 0, height: 0, decoded: false };
  }
  const { width, height } = bitmap;
  const side = Math.max(width, height);
  if (side <= MAX_SIDE && file.size <= KEEP_AS_IS_BYTES && PLAIN_TYPES.has(file.type)) {
    bitmap.close();
    return { name, dataUrl: await readAsDataUrl(file), width, height, decoded: true };
  }
  const scale = Math.min(1, MAX_SIDE / side);
  const w = Math.max(1, Math.round(width * scale));
  const h = Math.max(1, Math.round(height * scale));
  const canvas = document.createElement("canvas");
  canvas.width = w;
  canvas.height = h;
  const ctx = canvas.getContext("2d");
  ctx.fillStyle = "#fff"; // JPEG has no alpha
  ctx.fillRect(0, 0, w, h);
  ctx.drawImage(bitmap, 0, 0, w, h);
  bitmap.close();
  const blob = await new Promise((resolve) => canvas.toBlob(resolve, "image/jpeg", 0.9));
  if (!blob) throw new Error(`${name} could not be re-encoded`);
  return { name, dataUrl: await readAsDataUrl(blob), width: w, height: h, decoded: true };
}

/** The image files in a DataTransfer (drop or paste), in order. */
export function imageFiles(dt) {
  if (!dt) return [];
  const out = [];
  if (dt.items && dt.items.length) {
    for (const item of dt.items) {
      if (item.kind === "file") {
        const f = item.getAsFile();
        if (f) out.push(f);
      }
    }
  } else if (dt.files) {
    out.push(...dt.files);
  }
  return out;
}

/** Does this drag carry files? */
export function dragHasFiles(e) {
  const types = e.dataTransfer && e.dataTransfer.types;
  return !!types && Array.from(types).includes("Files");
}

/** A data: URL for base64 image bytes from the server, by their magic number; null if not base64. */
export function imageDataUrl(b64) {
  if (typeof b64 !== "string" || !/^[A-Za-z0-9+/]+={0,2}$/.test(b64)) return null;
  const mime = b64.startsWith("/9j/")
    ? "image/jpeg"
    : b64.startsWith("UklGR")
      ? "image/webp"
      : b64.startsWith("R0lGOD")
        ? "image/gif"
        : "image/png";
  return `data:${mime};base64,${b64}`;
}
