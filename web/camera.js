// One still from the camera, for input_image: open it, take a frame, close it again.

const WIDTH = 1280; // asked of the camera; the server scales images to vision.max_side anyway
const HEIGHT = 720;

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
    const blob = await new Promise((resolve) => canvas.toBlob(resolve, "image/jpeg", 0.9));
    if (!blob) throw new Error("the camera frame could not be encoded");
    return new File([blob], "camera snapshot.jpg", { type: "image/jpeg" });
  } finally {
    for (const track of stream.getTracks()) track.stop();
  }
}
