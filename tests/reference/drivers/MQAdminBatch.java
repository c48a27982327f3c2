import org.apache.rocketmq.tools.command.MQAdminStartup;

import java.io.PrintStream;

/**
 * Runs several real mqadmin (rocketmq-tools 4.9.8 MQAdminStartup) commands in one JVM, so a
 * test pays one JVM start instead of one per command. Each argument is one command line with
 * its words separated by '|'. Output (stdout and stderr, where the tool prints its stack
 * traces) is framed by "@@@ BEGIN i" / "@@@ END i" lines.
 */
public class MQAdminBatch {
    public static void main(String[] args) throws Exception {
        PrintStream out = System.out;
        System.setErr(out);
        for (int i = 0; i < args.length; i++) {
            out.println("@@@ BEGIN " + i);
            out.flush();
            MQAdminStartup.main0(args[i].split("\\|"), null);
            out.flush();
            out.println();
            out.println("@@@ END " + i);
            out.flush();
            Thread.sleep(5); // each command names its client instance after the current millisecond
        }
    }
}
