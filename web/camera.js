// One still from the camera, for input_image: open it, take a frame, close it again.

// asked of the camera: a 960×540 JPEG at 0.85 stays well under the 256 KiB a WebRTC data-channel
// message may carry (docs/WEBRTC.md) once base64-encoded, and is ample for the server's models
const WIDTH = 960;
const HEIGHT = 540;
const QUALITY = 0.85;

/** Whether this browser can open a camera at all (the button is hidden otherwise). */
export function cameraAvailable() {
  return Boolean(navigator.mediaDevices && navigator.mediaDevices.getUserMedia);
}

/** A JPEG File of what the camera sees now. Throws an Error whose message can be shown. */
export async function snapshot() {
  let stream;
  try {
    stream = await navigator.mediaDevices.getUserMedia({ video: { width: { ideal: WIDTH }, height: { ideal: HEIGHT } } });
  } catch (e) {
    throw new Error(e && e.name === "NotAllowedError" ? "camera permission was denied" : "no camera could be opened");
  }
  try {
    const video = document.createElement("video");
    video.muted = true;
    video.playsInline = true;
    video.srcObject = stream;
    await video.play();
    if (!video.videoWidth) {
      await new Promise((resolve) => video.addEventListener("loadeddata", resolve, { once: true }));
    }
    const canvas = document.createElement("canvas");
    canvas.width = video.videoWidth;
    canvas.height = video.videoHeight;
    canvas.getContext("2d").drawImage(video, 0, 0);
    const blob = await new Promise((resolve) => canvas.toBlob(resolve, "image/jpeg", QUALITY));
    if (!blob) throw new Error("the camera frame could not be encoded");
    return new File([blob], "camera snapshot.jpg", { type: "image/jpeg" });
  } finally {
    for (const track of stream.getTracks()) track.stop();
  }
}
