package redisstore

import "errors"

// ErrNotAnswering is the error of a command the client did not send because Redis left the last
// commands unanswered.
var ErrNotAnswering = errors.New("redis is not answering: command not sent")
