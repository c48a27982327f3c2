// The official RocketMQ 5.x Go client (github.com/apache/rocketmq-clients/golang/v5) against
// a 5.x endpoint:
//   go5driver ENDPOINT TOPIC GROUP COUNT [FAIL_ONCE_BODY]
// A producer sends COUNT messages ("go-<i>"); a push consumer of GROUP consumes them. With
// FAIL_ONCE_BODY its listener answers FAILURE to the first delivery of that body (a nack: the
// message must come back after the client's backoff). Prints one RESULT line (JSON) per send
// and per delivery, then RESULT {"all_consumed": true|false}; exits 1 when not all came.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
)

var out sync.Mutex

func result(v map[string]any) {
	b, _ := json.Marshal(v)
	out.Lock()
	fmt.Println("RESULT " + string(b))
	out.Unlock()
}

func fail(step string, err error) {
	result(map[string]any{"error": step + ": " + err.Error()})
	os.Exit(2)
}

func main() {
	endpoint, topic, group := os.Args[1], os.Args[2], os.Args[3]
	count, _ := strconv.Atoi(os.Args[4])
	failOnce := ""
	if len(os.Args) > 5 {
		failOnce = os.Args[5]
	}
	os.Setenv("rocketmq.client.enableSsl", "false")
	rmq.ResetLogger()
	creds := &credentials.SessionCredentials{}
	producer, err := rmq.NewProducer(&rmq.Config{Endpoint: endpoint, Credentials: creds}, rmq.WithTopics(topic))
	if err != nil {
		fail("producer", err)
	}
	if err = producer.Start(); err != nil {
		fail("producer start", err)
	}
	for i := 0; i < count; i++ {
		msg := &rmq.Message{Topic: topic, Body: []byte(fmt.Sprintf("go-%d", i))}
		receipts, err := producer.Send(context.TODO(), msg)
		if err != nil {
			fail("send", err)
		}
		result(map[string]any{"message_id": receipts[0].MessageID})
	}
	producer.GracefulStop()

	var mu sync.Mutex
	seen := map[string]int{}
	done := make(chan struct{})
	consumed := 0
	consumer, err := rmq.NewPushConsumer(&rmq.Config{Endpoint: endpoint, ConsumerGroup: group, Credentials: creds},
		rmq.WithPushAwaitDuration(5*time.Second),
		rmq.WithPushSubscriptionExpressions(map[string]*rmq.FilterExpression{topic: rmq.SUB_ALL}),
		rmq.WithPushMessageListener(&rmq.FuncMessageListener{Consume: func(mv *rmq.MessageView) rmq.ConsumerResult {
			body := string(mv.GetBody())
			mu.Lock()
			seen[body]++
			nack := body == failOnce && seen[body] == 1
			mu.Unlock()
			line := map[string]any{"id": mv.GetMessageId(), "body": body, "attempt": mv.GetDeliveryAttempt(),
				"received_ms": time.Now().UnixMilli()}
			if nack {
				line["failed"] = true
				result(line)
				return rmq.FAILURE
			}
			result(line)
			mu.Lock()
			consumed++
			if consumed == count {
				close(done)
			}
			mu.Unlock()
			return rmq.SUCCESS
		}}))
	if err != nil {
		fail("push consumer", err)
	}
	if err = consumer.Start(); err != nil {
		fail("push consumer start", err)
	}
	all := true
	select {
	case <-done:
	case <-time.After(90 * time.Second):
		all = false
	}
	time.Sleep(time.Second) // copies of an acked message would come now
	consumer.GracefulStop()
	result(map[string]any{"all_consumed": all})
	if !all {
		os.Exit(1)
	}
}
