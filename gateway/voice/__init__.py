"""The voice pipeline every room shares: Whisper's one queue and worker, input cleaning, turn-taking and
Smart Turn, speech synthesis and its playback clock. It knows no session or protocol: the Realtime
session, WebRTC calls, phone calls and the HTTP audio endpoints all come to it from above."""
